"""``hetflow export kubernetes``: a plan rendered as Kubernetes objects.

No cluster runs here.  The output is pinned by golden files (regenerate them with
HETFLOW_UPDATE_GOLDEN=1 and review the diff), checked against the OpenAPI schema of the
official client (``validate_objects``), and taken apart field by field in named tables.
The driver's DAG logic runs for real in test_kubernetes_driver.py.
"""

from __future__ import annotations

import copy
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from hetflow.errors import HetflowError
from hetflow.export.kubernetes import (
    cpu_expressions,
    export_kubernetes,
    gfd_product,
    pinned_image_for,
    to_yaml,
    validate_objects,
)
from hetflow.kube import DNS_LABEL_RE
from hetflow.plan.build import build_instance
from hetflow.plan.instance import Plan
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.sizing.cluster import Cluster, load_cluster, parse_cluster
from hetflow.spec.load.loader import load_workflow
from hetflow.spec.models import Workflow
from tests.unit.builders import load_steps

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("HETFLOW_UPDATE_GOLDEN") == "1"
RUN = "c0ffee01"

# A small cluster for the tables: CPU nodes with labels, and an Ice Lake node with two T4s.
CLUSTER = """\
apiVersion: hetflow/v1
kind: Cluster
name: tables
nodeTypes:
  - {name: cpu, count: 2, cores: 8, memory: 32Gi, labels: {disk: ssd, zone: a}}
  - name: gpu
    count: 1
    cores: 8
    memory: 64Gi
    microarchitecture: icelake
    gpus: {model: Tesla T4, count: 2, memory: 16Gi, computeCapability: "7.5"}
"""

Obj = dict[str, Any]


# --- builders ---------------------------------------------------------------------------


def plan_for(workflow: Workflow, cluster: Cluster) -> Plan:
    instance = build_instance(workflow, cluster.classes(), bandwidth=cluster.bandwidth_bytes)
    return plan_heuristic(instance, seed=0)


def export(body: str, cluster_text: str = CLUSTER, **kw: Any) -> list[Obj]:
    """The objects for a workflow whose ``steps:`` are ``body``, planned on ``cluster_text``."""
    workflow = load_steps(body).workflow
    cluster = parse_cluster(cluster_text)
    kw.setdefault("uid", 1000)
    kw.setdefault("gid", 1000)
    return export_kubernetes(workflow, cluster, plan_for(workflow, cluster), run_id=RUN, **kw)


def job(objects: list[Obj], step: str) -> Obj:
    return next(o for o in objects if o["kind"] == "Job" and o["metadata"]["labels"].get("hetflow.step") == step)


def driver(objects: list[Obj]) -> Obj:
    return next(o for o in objects if o["metadata"]["labels"].get("hetflow.role") == "driver" and o["kind"] == "Job")


def pod(j: Obj) -> Obj:
    spec: Obj = j["spec"]["template"]["spec"]
    return spec


def container(j: Obj, name: str = "step") -> Obj:
    p = pod(j)
    return next(c for c in [*p.get("initContainers", []), *p["containers"]] if c["name"] == name)


def terms(j: Obj) -> list[list[tuple[str, str, tuple[str, ...]]]]:
    """The required node affinity as (key, operator, values) per term."""
    selector = pod(j)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [
        [(e["key"], e["operator"], tuple(e.get("values", ()))) for e in t["matchExpressions"]]
        for t in selector["nodeSelectorTerms"]
    ]


def env_of(c: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}


def fake_image_for(image: str, node_class: str) -> str:
    """A digest per (image, class), as a registry's index would pin one build per class."""
    repo = image.rsplit(":", 1)[0]
    return f"{repo}@sha256:{hashlib.sha256(f'{image}|{node_class}'.encode()).hexdigest()}"


def example(name: str) -> tuple[Workflow, Cluster]:
    workflow = load_workflow(ROOT / "examples" / name / "workflow.yaml").workflow
    return workflow, load_cluster(ROOT / "examples" / "clusters" / "hetero-16.yaml")


# --- golden files -----------------------------------------------------------------------

# circuit: a namespace and images pinned per node class; meanpool: kubectl's namespace,
# images as written, and a claim that must already exist.
GOLDEN_CASES: dict[str, dict[str, Any]] = {
    "circuit": {"namespace": "hetflow", "image_for": fake_image_for},
    "meanpool": {"namespace": None, "claim_size": None},
}


def golden_objects(name: str) -> list[Obj]:
    workflow, cluster = example(name)
    return export_kubernetes(
        workflow, cluster, plan_for(workflow, cluster), run_id=RUN, uid=1000, gid=1000, **GOLDEN_CASES[name]
    )


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden(name: str) -> None:
    path = GOLDEN / f"kubernetes-{name}.yaml"
    text = to_yaml(golden_objects(name))
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with HETFLOW_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(encoding="utf-8"), (
        f"the export of examples/{name} changed (the exporter or the planner did); if that is "
        f"intended, rerun with HETFLOW_UPDATE_GOLDEN=1 and review the diff of {path.name}"
    )


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_objects_are_valid(name: str) -> None:
    pytest.importorskip("kubernetes")
    assert validate_objects(golden_objects(name)) == []


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_yaml_is_deterministic_and_reads_back(name: str) -> None:
    objects = golden_objects(name)
    text = to_yaml(objects)
    assert text == to_yaml(golden_objects(name))
    assert list(yaml.safe_load_all(text)) == objects
    assert text.startswith(f"# hetflow run {RUN} of workflow {name}")


def test_every_planned_step_has_a_job_in_topological_order() -> None:
    objects = golden_objects("circuit")
    kinds = [o["kind"] for o in objects]
    assert kinds[:5] == ["PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"]
    steps = [o["metadata"]["labels"]["hetflow.step"] for o in objects if "hetflow.step" in o["metadata"]["labels"]]
    assert steps == ["netlist", "synthesize", "place", "route", "simulate", "litho", "signoff"]
    assert objects[-1] is driver(objects)


# --- GPU steps --------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuCase:
    step: str  # the step's YAML (as a mapping body, indented under its name)
    limit: str  # nvidia.com/gpu
    constraint_terms: list[list[tuple[str, str, tuple[str, ...]]]]  # GFD memory/compute expressions per term


GPU_CASES = [
    pytest.param(GpuCase("resources: {gpus: 1}", "1", [[]]), id="no-constraint"),
    pytest.param(
        GpuCase(
            'resources: {gpus: 1}\ngpu: {min_compute_capability: "7.0"}',
            "1",
            [[("nvidia.com/gpu.compute.major", "Gt", ("6",))]],
        ),
        id="cc-major",
    ),
    pytest.param(
        GpuCase(
            'resources: {gpus: 1}\ngpu: {min_compute_capability: "7.5"}',
            "1",
            [
                [("nvidia.com/gpu.compute.major", "Gt", ("7",))],
                [("nvidia.com/gpu.compute.major", "In", ("7",)), ("nvidia.com/gpu.compute.minor", "Gt", ("4",))],
            ],
        ),
        id="cc-major-minor-is-two-terms",
    ),
    pytest.param(
        GpuCase(
            "resources: {gpus: 2}\ngpu: {min_memory: 8Gi}",
            "2",
            [[("nvidia.com/gpu.memory", "Gt", ("8191",))]],
        ),
        id="memory-in-mib",
    ),
    pytest.param(
        GpuCase(
            'resources: {gpus: 1}\ngpu: {min_memory: 2Gi, min_compute_capability: "7.0", models: [T4]}',
            "1",
            [[("nvidia.com/gpu.memory", "Gt", ("2047",)), ("nvidia.com/gpu.compute.major", "Gt", ("6",))]],
        ),
        id="memory-and-cc",
    ),
]


@pytest.mark.parametrize("case", GPU_CASES)
def test_gpu_step(case: GpuCase) -> None:
    body = "train:\n  image: cuda:12\n" + "".join(f"  {line}\n" for line in case.step.splitlines())
    j = job(export(body), "train")
    c = container(j)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == case.limit
    assert "nvidia.com/gpu" not in c["resources"]["requests"]  # extended resources: the limit is the request
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(c)  # the device plugin sets it
    shown = ("nvidia.com/gpu.product", "nvidia.com/gpu.sharing-strategy")
    gfd = [[e for e in t if e[0].startswith("nvidia.com/gpu.") and e[0] not in shown] for t in terms(j)]
    assert gfd == case.constraint_terms
    for t in terms(j):  # every term pins the planned class's GPU product and CPU
        assert ("nvidia.com/gpu.product", "In", ("Tesla-T4", "Tesla-T4-SHARED")) in t
        # whole GPUs: not a node whose device plugin hands out time-sliced or MPS replicas
        assert ("nvidia.com/gpu.sharing-strategy", "NotIn", ("time-slicing", "mps")) in t
        assert ("kubernetes.io/arch", "In", ("amd64",)) in t
        assert ("feature.node.kubernetes.io/cpu-cpuid.AVX512F", "In", ("true",)) in t
    assert pod(j)["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert j["metadata"]["labels"]["hetflow.node-class"] == "gpu"


@pytest.mark.parametrize(
    ("model", "label"),
    [
        pytest.param("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", id="a100"),
        pytest.param("Tesla T4", "Tesla-T4", id="t4"),
        pytest.param("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", id="h100"),
        pytest.param("NVIDIA GeForce RTX 3090 (rev a1)", "NVIDIA-GeForce-RTX-3090--rev-a1", id="odd-characters"),
    ],
)
def test_gfd_product(model: str, label: str) -> None:
    assert gfd_product(model) == label


# --- CPU steps --------------------------------------------------------------------------

CPU_VARIANT_CHOSEN = (
    "work:\n  variants:\n"
    "    gpu: {image: cuda, resources: {gpus: 8}}\n"  # more GPUs than any node: never chosen
    "    cpu: {image: busybox, resources: {cpus: 2, memory: 1Gi}}\n"
)
CPU_STEPS = [
    pytest.param("work:\n  image: busybox\n  resources: {cpus: 2, memory: 1Gi}\n", id="cpu-only-step"),
    pytest.param(CPU_VARIANT_CHOSEN, id="cpu-variant-chosen"),
]


@pytest.mark.parametrize("body", CPU_STEPS)
def test_cpu_step(body: str) -> None:
    j = job(export(body), "work")
    c = container(j)
    assert c["resources"] == {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    assert env_of(c)["NVIDIA_VISIBLE_DEVICES"] == "void"  # a CUDA base image's =all must not leak GPUs
    assert terms(j) == [
        [
            ("kubernetes.io/arch", "In", ("amd64",)),
            ("disk", "In", ("ssd",)),
            ("zone", "In", ("a",)),
            ("nvidia.com/gpu.product", "DoesNotExist", ()),
        ]
    ]
    assert "tolerations" not in pod(j)
    assert j["metadata"]["labels"]["hetflow.node-class"] == "cpu"


@pytest.mark.parametrize(
    ("cpus", "memory", "want"),
    [
        pytest.param(1, "512Mi", {"cpu": "1", "memory": "512Mi"}, id="whole"),
        pytest.param(0.5, "2Gi", {"cpu": "500m", "memory": "2Gi"}, id="half-cpu"),
        pytest.param(1.25, "1536Mi", {"cpu": "1250m", "memory": "1536Mi"}, id="millicores"),
        pytest.param(1, "10000000", {"cpu": "1", "memory": "10000000"}, id="plain-bytes"),  # >= 6Mi, podman's least,
    ],
)
def test_quantities(cpus: float, memory: str, want: dict[str, str]) -> None:
    j = job(export(f"s:\n  image: busybox\n  resources: {{cpus: {cpus}, memory: '{memory}'}}\n"), "s")
    assert container(j)["resources"]["requests"] == want


@pytest.mark.parametrize(
    ("microarchitecture", "want"),
    [
        pytest.param("x86_64", ["kubernetes.io/arch=amd64"], id="generic-x86"),
        pytest.param("x86_64_v2", ["kubernetes.io/arch=amd64"], id="v2-flags-are-nfd-blacklisted"),
        pytest.param("x86_64_v3", ["kubernetes.io/arch=amd64", "cpuid.AVX", "cpuid.AVX2", "cpuid.FMA3"], id="v3"),
        pytest.param(
            "x86_64_v4",
            [
                "kubernetes.io/arch=amd64",
                *("cpuid.AVX", "cpuid.AVX2", "cpuid.AVX512BW", "cpuid.AVX512CD"),
                *("cpuid.AVX512DQ", "cpuid.AVX512F", "cpuid.AVX512VL", "cpuid.FMA3"),
            ],
            id="v4",
        ),
        pytest.param("neoverse_v1", ["kubernetes.io/arch=arm64", "cpuid.SVE"], id="arm-sve"),
        pytest.param("neoverse_n1", ["kubernetes.io/arch=arm64"], id="arm-no-sve"),
        pytest.param("z80", [], id="unknown-to-archspec"),
    ],
)
def test_cpu_expressions(microarchitecture: str, want: list[str]) -> None:
    got = [
        f"{e['key']}={e['values'][0]}" if e["key"] == "kubernetes.io/arch" else e["key"].rsplit("-", 1)[1]
        for e in cpu_expressions(microarchitecture)
    ]
    assert got == want
    assert all(e["values"] == ["true"] for e in cpu_expressions(microarchitecture)[1:])


def test_icelake_class_requires_its_avx512_extensions() -> None:
    flags = {e["key"].rsplit(".", 1)[1] for e in cpu_expressions("icelake")[1:]}
    assert {"AVX512F", "AVX512VNNI", "AVX512VBMI2"} <= flags
    assert not flags & {"SSE42", "POPCNT", "BMI1", "BMI2", "F16C", "LZCNT"}  # NFD's default blacklist


# --- hardening --------------------------------------------------------------------------

STEP = "s:\n  image: busybox\n  command: [sh, -c, 'echo hi']\n"


def get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else obj[part]
    return obj


HARDENING = [
    ("securityContext.runAsUser", 1234),
    ("securityContext.runAsGroup", 567),
    ("securityContext.runAsNonRoot", True),
    ("securityContext.seccompProfile.type", "RuntimeDefault"),
    ("automountServiceAccountToken", False),
    ("enableServiceLinks", False),
    ("restartPolicy", "Never"),
    ("containers.0.securityContext.allowPrivilegeEscalation", False),
    ("containers.0.securityContext.capabilities.drop", ["ALL"]),
    ("containers.0.securityContext.readOnlyRootFilesystem", True),
    ("containers.0.securityContext.privileged", False),
    ("initContainers.0.securityContext.allowPrivilegeEscalation", False),
    ("initContainers.0.securityContext.capabilities.drop", ["ALL"]),
    ("initContainers.0.securityContext.readOnlyRootFilesystem", True),
    ("volumes.1.emptyDir.medium", "Memory"),
    ("volumes.1.emptyDir.sizeLimit", "256Mi"),
]


@pytest.mark.parametrize(("path", "want"), [pytest.param(p, w, id=p) for p, w in HARDENING])
def test_step_pod_hardening(path: str, want: object) -> None:
    assert get(pod(job(export(STEP, uid=1234, gid=567), "s")), path) == want


@pytest.mark.parametrize(
    ("path", "want"),
    [
        pytest.param("securityContext.runAsUser", 1234, id="uid"),
        pytest.param("containers.0.securityContext.capabilities.drop", ["ALL"], id="caps"),
        pytest.param("containers.0.securityContext.readOnlyRootFilesystem", True, id="read-only"),
        pytest.param("serviceAccountName", f"hf-{RUN}", id="its-own-account"),
    ],
)
def test_driver_pod_hardening(path: str, want: object) -> None:
    assert get(pod(driver(export(STEP, uid=1234, gid=567))), path) == want


def test_root_submitter_gets_no_run_as_non_root() -> None:
    ctx = pod(job(export(STEP, uid=0, gid=0), "s"))["securityContext"]
    assert ctx["runAsUser"] == 0
    assert "runAsNonRoot" not in ctx


def test_tmp_and_home() -> None:
    c = container(job(export(STEP), "s"))
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
    assert env_of(c)["HOME"] == "/tmp"


ENV_STEP = """\
s:
  image: busybox
  command: [sh, -c, 'echo $HOME $(date) $$']
  env: {MODE: fast, HOME: /root, CUDA_VISIBLE_DEVICES: "0", LD_PRELOAD: /x.so, PRICE: "$(cost)"}
"""


@pytest.mark.parametrize(
    ("name", "want"),
    [
        pytest.param("MODE", "fast", id="user-variable"),
        pytest.param("HOME", "/tmp", id="reserved-home-is-ours"),
        pytest.param("CUDA_VISIBLE_DEVICES", None, id="reserved-dropped"),
        pytest.param("LD_PRELOAD", None, id="preload-dropped"),
        pytest.param("HETFLOW_RUN_ID", RUN, id="run-id"),
        pytest.param("HETFLOW_STEP", "s", id="step-name"),
        pytest.param("PRICE", "$$(cost)", id="dollar-kept-literal"),
    ],
)
def test_environment(name: str, want: str | None) -> None:
    assert env_of(container(job(export(ENV_STEP), "s"))).get(name) == want


def test_command_is_args_with_dollars_kept_literal() -> None:
    c = container(job(export(ENV_STEP), "s"))
    assert "command" not in c  # podman keeps the image's ENTRYPOINT: so does `args`
    assert c["args"] == ["sh", "-c", "echo $$HOME $$(date) $$$$"]


# --- node_selector ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("s:\n  image: busybox\n  node_selector: {disk: ssd}\n", id="step-level"),
        pytest.param(
            "s:\n  variants:\n    v: {image: busybox, node_selector: {disk: ssd}}\n",
            id="variant-level",
        ),
        pytest.param(
            "s:\n  node_selector: {disk: ssd}\n  variants:\n    v: {image: busybox}\n",
            id="step-level-over-variants",
        ),
    ],
)
def test_node_selector(body: str) -> None:
    j = job(export(body), "s")
    assert pod(j)["nodeSelector"] == {"disk": "ssd"}
    assert ("disk", "In", ("ssd",)) in terms(j)[0]  # the planned class's labels too


def test_no_node_selector_when_none_asked() -> None:
    assert "nodeSelector" not in pod(job(export(STEP), "s"))


# --- images -----------------------------------------------------------------------------

TWO_CLASSES = """\
cpustep:
  image: registry.example/tools:1
gpustep:
  needs: [cpustep]
  image: registry.example/tools:1
  resources: {gpus: 1}
"""


def test_image_pinned_by_digest_per_class() -> None:
    calls: list[tuple[str, str]] = []

    def image_for(image: str, node_class: str) -> str:
        calls.append((image, node_class))
        return fake_image_for(image, node_class)

    objects = export(TWO_CLASSES, image_for=image_for)
    assert sorted(calls) == [("registry.example/tools:1", "cpu"), ("registry.example/tools:1", "gpu")]
    for step, cls in (("cpustep", "cpu"), ("gpustep", "gpu")):
        j = job(objects, step)
        c = container(j)
        assert c["image"] == fake_image_for("registry.example/tools:1", cls)
        assert c["imagePullPolicy"] == "IfNotPresent"
        assert j["metadata"]["annotations"]["hetflow.image"] == "registry.example/tools:1"
    assert container(job(objects, "cpustep"))["image"] != container(job(objects, "gpustep"))["image"]


def test_image_as_written_without_a_resolver() -> None:
    j = job(export(TWO_CLASSES), "gpustep")
    assert container(j)["image"] == "registry.example/tools:1"
    assert "imagePullPolicy" not in container(j)
    assert "hetflow.image" not in j["metadata"]["annotations"]


@dataclass
class FakeResolve:
    pinned: str | None


def test_pinned_image_for_uses_the_class_and_caches() -> None:
    seen: list[tuple[str, str, int]] = []

    def resolver(image: str, node: Any) -> Any:
        seen.append((image, node.name, len(node.gpus)))
        if image.startswith("gone/"):
            raise HetflowError("registry unreachable")
        return FakeResolve(None if image.startswith("nobuild/") else f"{image}@sha256:{'a' * 64}")

    image_for = pinned_image_for(parse_cluster(CLUSTER).classes(), resolver)
    assert image_for("x/y:1", "gpu") == f"x/y:1@sha256:{'a' * 64}"
    assert image_for("x/y:1", "gpu") == f"x/y:1@sha256:{'a' * 64}"
    assert image_for("gone/y:1", "cpu") == "gone/y:1"  # unreadable from here: as written
    assert image_for("nobuild/y:1", "cpu") == "nobuild/y:1"
    assert seen == [("x/y:1", "gpu", 2), ("gone/y:1", "cpu", 0), ("nobuild/y:1", "cpu", 0)]


# --- data: inputs and outputs -----------------------------------------------------------

DATA = """\
gen:
  image: busybox
  outputs: [matrix.npy, parts/a.bin]
use:
  image: busybox
  inputs: {matrix: gen/matrix.npy, part: gen/parts/a.bin}
  outputs: [result.json]
"""


@pytest.mark.parametrize(
    ("mount_path", "sub_path", "read_only"),
    [
        pytest.param("/out", f"runs/{RUN}/attempts/use/1/out", False, id="out-is-its-own-staging"),
        pytest.param("/in/matrix/matrix.npy", f"runs/{RUN}/steps/gen/out/matrix.npy", True, id="input-file"),
        pytest.param("/in/part/a.bin", f"runs/{RUN}/steps/gen/out/parts/a.bin", True, id="input-in-subdirectory"),
    ],
)
def test_step_mounts(mount_path: str, sub_path: str, read_only: bool) -> None:
    mounts = {m["mountPath"]: m for m in container(job(export(DATA), "use"))["volumeMounts"]}
    assert mounts[mount_path]["name"] == "work"
    assert mounts[mount_path]["subPath"] == sub_path
    assert mounts[mount_path].get("readOnly", False) is read_only


def test_clean_container_empties_the_staging_directory() -> None:
    c = container(job(export(DATA), "use"), "clean")
    assert c["volumeMounts"] == [{"name": "work", "mountPath": "/attempt", "subPath": f"runs/{RUN}/attempts/use"}]
    assert c["command"] == ["sh", "-c", "rm -rf /attempt/1 && mkdir -p /attempt/1/out"]


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        pytest.param({}, {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}}, id="rwx"),
        pytest.param(
            {"claim_size": "1Ti", "storage_class": "nfs", "workdir_claim": "scratch"},
            {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Ti"}},
                "storageClassName": "nfs",
            },
            id="size-and-class",
        ),
        pytest.param({"claim_size": None}, None, id="must-exist"),
    ],
)
def test_claim(kw: dict[str, Any], want: Obj | None) -> None:
    objects = export(DATA, **kw)
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert [c["spec"] for c in claims] == ([want] if want else [])
    name = kw.get("workdir_claim", "hetflow-work")
    assert pod(job(objects, "use"))["volumes"][0] == {"name": "work", "persistentVolumeClaim": {"claimName": name}}


# --- network ----------------------------------------------------------------------------


def test_network_policy_denies_steps_without_network() -> None:
    objects = export("quiet:\n  image: busybox\nloud:\n  image: busybox\n  network: true\n")
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"] == {
        # the namespace's one policy, the live backend's too (``kube.network_policy``)
        "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "hetflow", "hetflow.network": "none"}},
        "policyTypes": ["Ingress", "Egress"],
    }
    labels = {
        s: job(objects, s)["spec"]["template"]["metadata"]["labels"]["hetflow.network"] for s in ("quiet", "loud")
    }
    assert labels == {"quiet": "none", "loud": "allowed"}


def test_no_network_policy_when_every_step_has_network() -> None:
    assert not [o for o in export("s:\n  image: busybox\n  network: true\n") if o["kind"] == "NetworkPolicy"]


# --- labels, names, the DAG -------------------------------------------------------------


def test_labels_and_annotations() -> None:
    objects = export(CPU_VARIANT_CHOSEN)
    j = job(objects, "work")
    assert {k: v for k, v in j["metadata"]["labels"].items() if k.startswith("hetflow.")} == {
        "hetflow.run": RUN,
        "hetflow.workflow": "wf",
        "hetflow.role": "step",
        "hetflow.step": "work",
        "hetflow.variant": "cpu",
        "hetflow.node-class": "cpu",
    }
    notes = j["metadata"]["annotations"]
    assert notes["hetflow.plan"].startswith("cpu on cpu (cpu-")
    assert notes["hetflow.reasons"] == "gpu: asks for 8 GPUs; cpu has none"


def test_dag_wiring() -> None:
    body = """\
a:
  image: busybox
  outputs: [x]
b:
  image: busybox
  inputs: {x: a/x}
c:
  image: busybox
  needs: [a]
d:
  image: busybox
  needs: [b, c]
"""
    objects = export(body)
    step_jobs = [o for o in objects if o["metadata"]["labels"].get("hetflow.role") == "step" and o["kind"] == "Job"]
    assert all(j["spec"]["suspend"] is True for j in step_jobs)  # nothing runs before the driver says so
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert role["rules"][1] == {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["patch"],
        "resourceNames": sorted(j["metadata"]["name"] for j in step_jobs),
    }
    script = container(driver(objects), "driver")["command"][2]
    calls = [line.strip() for line in script.splitlines() if line.startswith("  step ")]
    assert calls == [
        f"step a hf-{RUN}-a '' x",
        f"step b hf-{RUN}-b a",
        f"step c hf-{RUN}-c a",
        f"step d hf-{RUN}-d 'b c'",
    ]


def test_step_names_become_unique_dns_labels() -> None:
    long = "x" * 60
    objects = export(f"a_b:\n  image: busybox\na-b:\n  image: busybox\n{long}:\n  image: busybox\n")
    names = [job(objects, s)["metadata"]["name"] for s in ("a_b", "a-b", long)]
    assert names[1] == f"hf-{RUN}-a-b"
    assert len(set(names)) == 3
    assert all(DNS_LABEL_RE.match(n) and len(n) <= 63 for n in names)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        pytest.param({"run_id": "Run_1"}, "cannot name Kubernetes objects", id="run-id"),
        pytest.param({"namespace": "My NS"}, "namespace 'My NS' is not a valid", id="namespace"),
        pytest.param({"poll_seconds": 0}, "poll_seconds", id="poll"),
        pytest.param({"uid": -1}, "uid and gid must be 0 or more", id="uid"),
        pytest.param({"claim_size": "ten gigs"}, "not a Kubernetes quantity; write e.g. 10Gi", id="claim-size"),
        pytest.param({"workdir_claim": "Work_Dir"}, "workdir claim 'Work_Dir' is not a valid", id="claim-name"),
    ],
)
def test_bad_arguments(kw: dict[str, Any], message: str) -> None:
    workflow, cluster = example("meanpool")
    args: dict[str, Any] = {"run_id": RUN, "uid": 1, "gid": 1, **kw}
    with pytest.raises(ValueError, match=message):
        export_kubernetes(workflow, cluster, plan_for(workflow, cluster), **args)


def test_plan_must_cover_the_workflow() -> None:
    workflow, cluster = example("meanpool")
    plan = plan_for(workflow, cluster)
    partial = Plan({"generate": plan.placements["generate"]}, plan.makespan, plan.cost, plan.algorithm)
    with pytest.raises(ValueError, match=r"no placement for step\(s\) pool; plan the workflow again"):
        export_kubernetes(workflow, cluster, partial, run_id=RUN, uid=1, gid=1)


def test_optional_step_left_out_of_the_plan_is_noted() -> None:
    workflow, cluster = example("circuit")
    plan = plan_for(workflow, cluster)
    without = Plan({k: v for k, v in plan.placements.items() if k != "litho"}, plan.makespan, plan.cost, "heft")
    objects = export_kubernetes(workflow, cluster, without, run_id=RUN, uid=1, gid=1)
    assert "litho" not in {o["metadata"]["labels"].get("hetflow.step") for o in objects}
    assert driver(objects)["metadata"]["annotations"]["hetflow.skipped"] == "optional, fits no node class: litho"


# --- validation catches what the API server would refuse ------------------------------


def _first_step_pod(objects: list[Obj]) -> Obj:
    return pod(job(objects, "netlist"))


Mutation = Callable[[list[Obj]], None]


@dataclass(frozen=True)
class Broken:
    mutate: Mutation
    expect: str  # a substring of one problem
    extra: Mapping[str, Any] = field(default_factory=dict)


def _set(path: str, value: object) -> Mutation:
    def mutate(objects: list[Obj]) -> None:
        *parents, last = path.split(".")
        target: Any = _first_step_pod(objects)
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if last.isdigit():
            target[int(last)] = value
        else:
            target[last] = value

    return mutate


def _rename_job(objects: list[Obj]) -> None:
    job(objects, "netlist")["metadata"]["name"] = "Hf_Netlist"


def _kind(objects: list[Obj]) -> None:
    objects[0]["kind"] = "PersistentVolume"


BROKEN = [
    pytest.param(
        Broken(_set("containers.0.resources.limits.cpu", 1), "limits.cpu: expected str, got an integer"),
        id="wrong-type-quantity-as-number",
    ),
    pytest.param(
        Broken(_set("containers.0.args", "python3 x.py"), "containers[0].args: expected a list, got a string"),
        id="wrong-type-args-as-string",
    ),
    pytest.param(Broken(_set("restartPolicy", None), "restartPolicy: a Job's pods must use"), id="job-restart"),
    pytest.param(
        Broken(_set("node_selector", {"a": "b"}), "spec.template.spec.node_selector: unknown field; did you mean"),
        id="snake-case-key",
    ),
    pytest.param(Broken(_set("containers.0.cpu", "1"), "containers[0].cpu: unknown field"), id="unknown-field"),
    pytest.param(
        Broken(_set("containers.0", {"image": "x"}), "containers[0].name: required field missing"),
        id="missing-required",
    ),
    pytest.param(
        Broken(_set("containers.0.resources.requests.memory", "2 GB"), "'2 GB' is not a quantity"),
        id="bad-quantity",
    ),
    pytest.param(
        Broken(_set("containers.0.volumeMounts.0.name", "nowhere"), "no volume 'nowhere' in the pod"),
        id="mount-of-no-volume",
    ),
    pytest.param(
        Broken(
            _set(
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0.matchExpressions.0",
                {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["8Gi"]},
            ),
            "Gt takes exactly one integer",
        ),
        id="gt-needs-an-integer",
    ),
    pytest.param(
        Broken(
            _set(
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0.matchExpressions.0",
                {"key": "a", "operator": "Above", "values": ["1"]},
            ),
            "'Above' is not one of",
        ),
        id="bad-operator",
    ),
    pytest.param(Broken(_rename_job, "metadata.name: 'Hf_Netlist' is not a valid name"), id="bad-name"),
    pytest.param(Broken(_kind, "kind 'PersistentVolume' is not one of"), id="unknown-kind"),
]


@pytest.mark.parametrize("case", BROKEN)
def test_validation_catches(case: Broken) -> None:
    pytest.importorskip("kubernetes")
    objects = copy.deepcopy(golden_objects("circuit"))
    case.mutate(objects)
    problems = validate_objects(objects)
    assert any(case.expect in p for p in problems), problems


def test_validation_names_the_object() -> None:
    pytest.importorskip("kubernetes")
    objects = copy.deepcopy(golden_objects("circuit"))
    _set("containers.0.resources.limits.cpu", 1)(objects)
    assert validate_objects(objects)[0].startswith(f"Job hf-{RUN}-netlist: spec.template.spec.containers[0]")
