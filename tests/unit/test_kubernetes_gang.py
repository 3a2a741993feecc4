"""Gang steps in the Kubernetes export: an Indexed Job and a headless Service for
``launcher: torch|none``, an MPIJob (kubeflow mpi-operator v2beta1) for ``launcher: mpi``,
and the driver that releases both.  No cluster runs here: the objects are pinned by a
golden file and checked against the official client's models and the MPIJob CRD schema."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetflow.export.kubernetes import export_kubernetes, to_yaml, validate_objects
from hetflow.plan.sizing.cluster import load_cluster
from hetflow.spec import GANG_ENV
from hetflow.spec.load.loader import load_workflow
from hetflow.spec.models import Workflow
from tests.unit.test_kubernetes import CLUSTER, GOLDEN, RUN, UPDATE, driver, export, plan_for
from tests.unit.test_kubernetes_driver import run_driver

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "kubernetes" / "gang" / "workflow.yaml"
INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

Obj = dict[str, Any]


def gang_workflow() -> Workflow:
    return load_workflow(EXAMPLE).workflow


def gang_objects() -> list[Obj]:
    workflow = gang_workflow()
    cluster = load_cluster(ROOT / "examples" / "clusters" / "nvlink-mixed.yaml")
    return export_kubernetes(workflow, cluster, plan_for(workflow, cluster), run_id=RUN, uid=1000, gid=1000)


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def env(c: Obj) -> dict[str, Obj]:
    return {e["name"]: {k: v for k, v in e.items() if k != "name"} for e in c["env"]}


def test_golden() -> None:
    path = GOLDEN / "kubernetes-gang.yaml"
    text = to_yaml(gang_objects())
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with HETFLOW_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(encoding="utf-8"), (
        "the export of examples/kubernetes/gang changed; if that is intended, rerun with "
        f"HETFLOW_UPDATE_GOLDEN=1 and review the diff of {path.name}"
    )
    assert list(yaml.safe_load_all(text)) == gang_objects()
    assert "&id" not in text  # no YAML anchors: every object reads on its own


def test_objects_are_valid() -> None:
    pytest.importorskip("kubernetes")
    pytest.importorskip("jsonschema")
    objects = gang_objects()
    assert [o["kind"] for o in objects if o["metadata"]["labels"].get("hetflow.step") in ("train", "solve")] == [
        "NetworkPolicy",
        "Service",
        "Job",
        "NetworkPolicy",
        "MPIJob",
    ]
    assert validate_objects(objects) == []


def test_torch_gang_is_an_indexed_job_with_a_headless_service() -> None:
    objects = gang_objects()
    job = named(objects, "Job", f"hf-{RUN}-train")
    svc = named(objects, "Service", f"hf-{RUN}-train")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    assert spec["suspend"] is True
    assert spec["backoffLimit"] == 1  # the step's retries
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"hetflow.run": RUN, "hetflow.step": "train"}
    assert svc["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    assert svc["spec"]["ports"] == [{"name": "gang", "port": 29500, "targetPort": 29500, "protocol": "TCP"}]
    (step,) = pod["containers"]
    assert step["resources"]["limits"]["nvidia.com/gpu"] == "2"  # per replica
    assert step["resources"]["requests"] == {"cpu": "8", "memory": "32Gi"}
    # replicas != 0 leave the shared staging directory alone
    assert "JOB_COMPLETION_INDEX" in pod["initContainers"][0]["command"][2]


def test_torch_env_contract_in_every_container() -> None:
    objects = gang_objects()
    job = named(objects, "Job", f"hf-{RUN}-train")
    for c in job["spec"]["template"]["spec"]["containers"]:
        e = env(c)
        assert set(GANG_ENV) <= set(e)
        for k in ("HETFLOW_RANK", "RANK", "NODE_RANK"):
            assert e[k] == {"valueFrom": {"fieldRef": {"fieldPath": INDEX}}}
        assert e["WORLD_SIZE"] == e["HETFLOW_WORLD_SIZE"] == {"value": "4"}
        assert e["MASTER_ADDR"] == {"value": f"hf-{RUN}-train-0.hf-{RUN}-train"}
        assert e["MASTER_PORT"] == {"value": "29500"}
        assert (e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) == ({"value": "0"}, {"value": "1"})
        assert [x["name"] for x in c["env"]] == sorted(x["name"] for x in c["env"])


GANG = """\
g:
  image: busybox
  command: [train]
  resources: {cpus: 1, memory: 1Gi}
  env: {RANK: "7", KEEP: "yes"}
  gang: {replicas: 2, launcher: %s, per_node: %d, port: 12345}
"""


def test_none_launcher_gets_only_hetflow_ranks_and_user_rank_is_dropped() -> None:
    (job,) = (o for o in export(GANG % ("none", 1)) if o["kind"] == "Job" and "hetflow.step" in o["metadata"]["labels"])
    e = env(job["spec"]["template"]["spec"]["containers"][0])
    assert set(GANG_ENV) & set(e) == {"HETFLOW_RANK", "HETFLOW_WORLD_SIZE"}
    assert e["KEEP"] == {"value": "yes"}


def test_user_cannot_override_the_gang_env() -> None:
    objects = export(GANG % ("torch", 2))
    job = next(o for o in objects if o["kind"] == "Job" and "hetflow.step" in o["metadata"]["labels"])
    e = env(job["spec"]["template"]["spec"]["containers"][0])
    assert e["RANK"] == {"valueFrom": {"fieldRef": {"fieldPath": INDEX}}}
    assert e["MASTER_PORT"] == {"value": "12345"}


def test_per_node_one_is_a_required_anti_affinity() -> None:
    objects = export(GANG % ("torch", 1))
    job = next(o for o in objects if o["kind"] == "Job" and "hetflow.step" in o["metadata"]["labels"])
    pod = job["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"] == {"matchLabels": {"hetflow.run": RUN, "hetflow.step": "g"}}
    assert "topologySpreadConstraints" not in pod
    assert validate_objects(objects) == [] if _has_client() else True


def test_per_node_two_is_a_balanced_spread() -> None:
    job = named(gang_objects(), "Job", f"hf-{RUN}-train")
    (c,) = job["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert (c["maxSkew"], c["topologyKey"], c["whenUnsatisfiable"]) == (1, "kubernetes.io/hostname", "DoNotSchedule")
    assert (c["nodeAffinityPolicy"], c["nodeTaintsPolicy"]) == ("Honor", "Honor")


def test_gpu_link_is_an_annotation_not_a_made_up_label() -> None:
    job = named(gang_objects(), "Job", f"hf-{RUN}-train")
    assert job["metadata"]["annotations"]["hetflow.io/gpu-link"] == "nvlink"
    assert job["spec"]["template"]["metadata"]["annotations"] == {"hetflow.io/gpu-link": "nvlink"}
    assert "nvlink" not in json.dumps(job["spec"]["template"]["spec"]["affinity"]).lower()


def test_mpi_gang_is_an_mpijob() -> None:
    mpi = named(gang_objects(), "MPIJob", f"hf-{RUN}-solve")
    assert mpi["apiVersion"] == "kubeflow.org/v2beta1"
    spec = mpi["spec"]
    assert spec["slotsPerWorker"] == 1
    assert spec["runLauncherAsWorker"] is False
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["runPolicy"] == {"suspend": True, "cleanPodPolicy": "Running", "backoffLimit": 0}
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert launcher["replicas"] == 1 and worker["replicas"] == 2
    (lc,) = launcher["template"]["spec"]["containers"]
    assert lc["command"] == ["mpirun"]
    assert lc["args"][:2] == ["-np", "2"]
    assert lc["args"][-5:] == ["/app/solver", "--steps", "1000", "--out", "/out/field.h5"]
    assert "nvidia.com/gpu" not in lc["resources"]["limits"]
    (wc,) = worker["template"]["spec"]["containers"]
    assert wc["resources"]["limits"] == {"cpu": "4", "memory": "8Gi", "rdma/hca_shared_devices_a": "1"}
    assert wc["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    for c in (lc, wc):
        assert env(c)["HETFLOW_WORLD_SIZE"] == {"value": "2"}
        assert env(c)["WORLD_SIZE"] == {"value": "2"}


def test_rdma_resource_is_configurable() -> None:
    rdma = CLUSTER.replace("labels: {disk: ssd, zone: a}}", "labels: {disk: ssd, zone: a}, rdma: true}")
    assert rdma != CLUSTER
    objects = export(GANG.replace("port: 12345", "network: rdma") % ("torch", 2), rdma, rdma_resource="rdma/hca")
    job = next(o for o in objects if o["kind"] == "Job" and "hetflow.step" in o["metadata"]["labels"])
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["rdma/hca"] == "1"
    with pytest.raises(ValueError, match="not an extended resource name"):
        export(GANG % ("torch", 2), rdma_resource="hca")


def test_mpi_gang_needs_a_command() -> None:
    body = "g:\n  image: busybox\n  gang: {replicas: 2, launcher: mpi}\n"
    with pytest.raises(ValueError, match="mpirun needs one"):
        export(body)


def _has_client() -> bool:
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("spec", "slotsPerWorkers"),
            1,
            "spec: Additional properties are not allowed ('slotsPerWorkers' was unexpected); "
            "did you mean 'slotsPerWorker'?",
        ),
        (("spec", "mpiImplementation"), "OpenMPi", "spec.mpiImplementation: 'OpenMPi' is not one of"),
        (("spec", "runPolicy", "suspend"), "yes", "spec.runPolicy.suspend: 'yes' is not of type 'boolean'"),
        (
            ("spec", "mpiReplicaSpecs", "Worker", "replicas"),
            "2",
            "spec.mpiReplicaSpecs.Worker.replicas: '2' is not of type 'integer'",
        ),
    ],
)
def test_invalid_mpijob_is_refused(path: tuple[str, ...], value: object, message: str) -> None:
    pytest.importorskip("jsonschema")
    pytest.importorskip("kubernetes")
    mpi = copy.deepcopy(named(gang_objects(), "MPIJob", f"hf-{RUN}-solve"))
    at = mpi
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    problems = validate_objects([mpi])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"MPIJob hf-{RUN}-solve: {message}"), problems[0]
    assert problems[0].endswith("(MPIJob CRD schema)")


def test_invalid_pod_in_an_mpijob_is_refused() -> None:
    pytest.importorskip("jsonschema")
    pytest.importorskip("kubernetes")
    mpi = copy.deepcopy(named(gang_objects(), "MPIJob", f"hf-{RUN}-solve"))
    mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "nope"
    (problem,) = validate_objects([mpi])
    assert "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].volumeMounts[0].name: no volume 'nope'" in problem


def test_driver_may_release_the_mpijob() -> None:
    objects = gang_objects()
    role = next(o for o in objects if o["kind"] == "Role")
    assert {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["patch"],
            "resourceNames": [f"hf-{RUN}-solve"]} in role["rules"]  # fmt: skip
    batch_patch = next(r for r in role["rules"] if r["apiGroups"] == ["batch"] and r["verbs"] == ["patch"])
    assert f"hf-{RUN}-solve" not in batch_patch["resourceNames"]
    assert f"hf-{RUN}-train" in batch_patch["resourceNames"]
    script = driver(objects)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert 'get mpijobs -l "$SEL"' in script
    assert "{.spec.runPolicy.suspend}" in script
    assert """patch mpijob "$j" --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}'""" in script
    assert f"MPIJOBS=' hf-{RUN}-solve '" in script


def test_a_run_without_mpi_never_asks_for_mpijobs() -> None:
    objects = export(GANG % ("torch", 2))
    role = next(o for o in objects if o["kind"] == "Role")
    assert all(r["apiGroups"] == ["batch"] for r in role["rules"])
    assert "mpijob" not in driver(objects)["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_driver_releases_and_waits_for_the_mpijob(tmp_path: Path) -> None:
    out = run_driver(tmp_path, gang_workflow(), polls={"solve": 3}, cluster_file="nvlink-mixed.yaml")
    assert out.returncode == 0, out.stdout
    assert sorted(out.released) == ["report", "shard", "solve", "train"]
    assert out.kinds == {"shard": "job", "train": "job", "solve": "mpijob", "report": "job"}
    for entry in out.log:
        assert sorted(entry["parents_done"]) == sorted(out.parents[entry["step"]]), entry
    assert (out.work / "steps" / "solve" / "done").exists()


def test_failed_mpijob_stops_its_descendants(tmp_path: Path) -> None:
    out = run_driver(tmp_path, gang_workflow(), outcomes={"solve": "fail"}, cluster_file="nvlink-mixed.yaml")
    assert out.returncode == 3
    assert "report" not in out.released
    assert "step solve failed" in out.stdout


assert CLUSTER  # the small cluster of test_kubernetes, for export()


def test_long_step_names_leave_room_for_the_pod_index() -> None:
    name = "x" * 60
    objects = export(GANG.replace("g:", f"{name}:", 1) % ("torch", 2))
    job = next(o for o in objects if o["kind"] == "Job" and "hetflow.step" in o["metadata"]["labels"])
    assert len(job["metadata"]["name"]) + len("-2") <= 63  # the last pod's hostname: JOB-2


def test_the_schema_is_package_data() -> None:
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["hetflow"]
    rel = "export/kubernetes/mpijob-v2beta1.schema.yaml"
    assert (ROOT / "src" / "hetflow" / rel).exists()
    assert any(fnmatch.fnmatch(rel, g) for g in globs)
    head = (ROOT / "src" / "hetflow" / rel).read_text().splitlines()[:4]
    assert any("github.com/kubeflow/mpi-operator/blob/" in line for line in head)


def test_cli_passes_the_rdma_resource(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hetflow.cli.main import app, register_commands

    register_commands(["export"])
    result = CliRunner().invoke(
        app,
        ["export", "kubernetes", str(EXAMPLE), "--cluster", str(ROOT / "examples/clusters/nvlink-mixed.yaml"),
         "--no-pin", "--run-id", RUN, "--uid", "1000", "--gid", "1000", "--rdma-resource", "rdma/ib"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    mpi = next(o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "MPIJob")
    worker = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["rdma/ib"] == "1"
