"""The Kubernetes backend's pure parts: a Job in the API's words (translate), a Job and its
pods read back as one state (states), Nodes and ResourceSlices as the planner's node types
(inventory).  The live behaviour is tested against a real control plane in
tests/integration/test_run_kubernetes.py."""

from __future__ import annotations

from typing import Any

import pytest

from hetflow.errors import EngineError, UsageError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.kubernetes import (
    KubernetesSettings,
    Placement,
    cel_selectors,
    job_objects,
    job_state,
    node_types,
    object_name,
    pod_state,
    read_nodes,
)
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.spec import GpuRequest

SPEC = ContainerSpec(
    name="hf-r1-align-1",
    image="localhost/hetflow-test/busybox:latest",
    command=("sh", "-c", "echo hi > /out/x"),
    user="1000:1000",
    labels={},
    env={"A": "1"},
    mounts=(Mount("/work/runs/r1/in/a", "/in/a"), Mount("/work/runs/r1/out", "/out", read_only=False)),
)


def job(**kw: Any) -> Job:
    base: dict[str, Any] = {"name": "hf-r1-align-1", "run_id": "r1", "step": "align", "attempt": 1}
    return Job(**(base | {"container": SPEC, "cpus": 1.5, "memory": 2**30} | kw))


def kube_job(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "Job")


def test_a_step_is_a_hardened_job_with_its_mounts_and_resources() -> None:
    objs = job_objects(job(), KubernetesSettings(), Placement(nodes=("kw-cpu-0",)))
    assert [o["kind"] for o in objs] == ["Job"]
    spec = kube_job(objs)["spec"]
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    assert c["args"] == ["sh", "-c", "echo hi > /out/x"]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
    }
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert c["resources"]["limits"] == {"cpu": "1500m", "memory": str(2**30)} == c["resources"]["requests"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/in/a"]["readOnly"] is True and mounts["/out"]["readOnly"] is False
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    assert host[mounts["/out"]["name"]] == "/work/runs/r1/out"
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["kw-cpu-0"]
    rule = spec["podFailurePolicy"]["rules"][0]
    assert rule["onPodConditions"] == [{"type": "DisruptionTarget"}] and rule["action"] == "FailJob"


def test_a_claim_mounts_by_sub_path_and_refuses_a_source_outside_it() -> None:
    s = KubernetesSettings(volume="claim", claim="work", claim_root="/work")
    pod = kube_job(job_objects(job(), s, Placement()))["spec"]["template"]["spec"]
    sub = {m["mountPath"]: m.get("subPath") for m in pod["containers"][0]["volumeMounts"]}
    assert sub["/out"] == "runs/r1/out"
    outside = ContainerSpec(**{**SPEC.__dict__, "mounts": (Mount("/elsewhere", "/in/x"),)})
    with pytest.raises(EngineError, match=r"/elsewhere .* not under kubernetes.claim_root /work"):
        job_objects(job(container=outside), s, Placement())


@pytest.mark.parametrize(
    ("request_", "gpus", "dra", "limits", "claim"),
    [
        (None, 2, False, {"nvidia.com/gpu": "2"}, False),
        (GpuRequest(count=1, vendor="amd"), 1, False, {"amd.com/gpu": "1"}, False),
        (GpuRequest(mig="1g.10gb"), 1, False, {"nvidia.com/mig-1g.10gb": "1"}, False),
        (GpuRequest(share=0.25), 1, False, {"nvidia.com/gpu": "1"}, False),
        (GpuRequest(count=2, memory=40 * 2**30), 2, True, {}, True),
    ],
    ids=["device-plugin", "amd", "mig", "share", "dra-claim"],
)
def test_gpus_are_asked_for_as_the_api_serves_them(
    request_: GpuRequest | None, gpus: int, dra: bool, limits: dict[str, str], claim: bool
) -> None:
    objs = job_objects(
        job(gpus=gpus, gpu_request=request_, gpu_model="NVIDIA H100 80GB HBM3"),
        KubernetesSettings(),
        Placement(dra=dra),
    )
    c = kube_job(objs)["spec"]["template"]["spec"]["containers"][0]
    got = {k: v for k, v in c["resources"]["limits"].items() if k not in ("cpu", "memory")}
    assert got == limits
    templates = [o for o in objs if o["kind"] == "ResourceClaimTemplate"]
    assert bool(templates) is claim
    if claim:
        exactly = templates[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert exactly["count"] == 2 and exactly["deviceClassName"] == "gpu.nvidia.com"
        exprs = [s["cel"]["expression"] for s in exactly["selectors"]]
        assert exprs == cel_selectors("NVIDIA H100 80GB HBM3", 40 * 2**30)
        assert c["resources"]["claims"] == [{"name": "gpus"}]


def test_cel_selectors_quote_the_model_and_compare_memory_as_a_quantity() -> None:
    assert cel_selectors('A "B"', 2**30) == [
        'device.attributes["gpu.nvidia.com"].productName == "A \\"B\\""',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("1073741824")) >= 0',
    ]


@pytest.mark.parametrize(
    "name", ["hf-r1-align-1", "hf-r1-a_b-1", "hf-" + "x" * 80 + "-1"], ids=["plain", "underscore", "long"]
)
def test_object_names_are_dns_labels_with_room_for_an_index(name: str) -> None:
    got = object_name(name)
    assert len(got) <= 56 and got.replace("-", "").isalnum() and got == got.lower()
    assert (got == name) is (name == "hf-r1-align-1")


def test_secrets_are_refused_with_what_to_do() -> None:
    secret = ContainerSpec(**{**SPEC.__dict__, "secrets": {"TOKEN": "x"}})
    with pytest.raises(EngineError, match="secrets are not passed to Kubernetes pods"):
        job_objects(job(container=secret), KubernetesSettings(), Placement())


def pod(
    phase: str, state: dict[str, Any] | None = None, node: str = "n1", conditions: list[Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if state is not None:
        status["containerStatuses"] = [{"name": "step", "image": "img", "state": state}]
    return {"metadata": {"name": "p", "annotations": {}}, "spec": {"nodeName": node}, "status": status}


T0, T1 = "2026-11-27T08:00:00Z", "2026-11-27T08:00:05Z"


@pytest.mark.parametrize(
    ("p", "running", "code", "status"),
    [
        (pod("Running", {"running": {"startedAt": T0}}), True, None, "RUNNING"),
        (pod("Succeeded", {"terminated": {"exitCode": 0, "startedAt": T0, "finishedAt": T1}}), False, 0, "Succeeded"),
        (pod("Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}), False, 3, "Error"),
        (pod("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), False, 137, "OOMKilled"),
        (pod("Pending", {"waiting": {"reason": "ErrImagePull", "message": "not found"}}), False, 125, "Failed"),
        (
            pod("Pending", None, "", [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]),
            True,
            None,
            "PENDING",
        ),
        (pod("Failed", None), False, 255, "Failed"),
    ],
    ids=["running", "succeeded", "exit-3", "oom", "image-pull", "unschedulable", "phase-only"],
)
def test_a_pod_reads_as_a_state(p: dict[str, Any], running: bool, code: int | None, status: str) -> None:
    s = pod_state("j", p)
    assert (s.running, s.exit_code, s.status) == (running, code, status)


def test_a_pod_states_times_and_reasons() -> None:
    done = pod_state("j", pod("Succeeded", {"terminated": {"exitCode": 0, "startedAt": T0, "finishedAt": T1}}))
    assert done.started is not None and done.ended == done.started + 5
    pull = pod_state("j", pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}))
    assert "image img" in pull.reason and "ImagePullBackOff" in pull.reason


def test_a_disruption_is_a_node_fault_and_a_quota_keeps_the_job_queued() -> None:
    why = "Pod default/p has condition DisruptionTarget matching FailJob rule"
    failed = {
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": why}]}
    }
    s = job_state("j", failed, [pod("Failed", None)])
    assert s.node_failed and not s.running
    queued = job_state("j", {"status": {}}, [], 'pods "p" is forbidden: exceeded quota: q')
    assert queued.running and queued.status == "PENDING" and "exceeded quota" in queued.reason
    assert job_state("j", {"status": {}}, []).reason == "Pending: no pod made yet"


def test_a_gang_runs_until_every_index_succeeded_and_fails_with_the_first_failure() -> None:
    gang = {"spec": {"completions": 2}, "status": {}}
    ok = pod("Succeeded", {"terminated": {"exitCode": 0}})
    run = pod("Running", {"running": {}})
    bad = pod("Failed", {"terminated": {"exitCode": 7, "finishedAt": T1}})
    assert job_state("j", gang, [ok, run]).running
    assert job_state("j", gang, [ok, ok]).exit_code == 0
    bad["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "1"
    failed = job_state("j", gang, [ok, bad])
    assert failed.exit_code == 7 and failed.reason.startswith("replica 1 ended with 7")


def node(name: str, cpu: str, mem: str, labels: dict[str, str] | None = None, **alloc: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": mem, **alloc},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_nodes_alike_form_one_type_and_gpus_come_from_gfd_labels_or_resource_slices() -> None:
    gfd = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960",
           "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0"}  # fmt: skip
    nodes = [
        node("cpu-0", "8", "32Gi"),
        node("cpu-1", "8", "32Gi"),
        {
            **node("a100", "16", "128Gi", gfd),
            "status": {**node("a100", "16", "128Gi", gfd, **{"nvidia.com/gpu": "4"})["status"]},
        },
        node("dra", "16", "128Gi"),
        {**node("down", "8", "32Gi"), "status": {"allocatable": {"cpu": "8"}, "conditions": []}},
        {**node("tainted", "8", "32Gi"), "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}},
        {**node("gputaint", "8", "32Gi"), "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
    ]
    slices = [{"spec": {"driver": "gpu.nvidia.com", "nodeName": "dra", "devices": [
        {"name": f"gpu-{i}", "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"},
                                             "cudaComputeCapability": {"version": "9.0.0"}},
         "capacity": {"memory": {"value": "80Gi"}}} for i in range(2)]}}]  # fmt: skip
    found = {n.name: n for n in read_nodes(nodes, slices)}
    assert "down" not in found and "tainted" not in found and "gputaint" in found
    assert (found["a100"].gpus, found["a100"].model, found["a100"].compute_capability) == (
        4,
        "NVIDIA A100-SXM4-40GB",
        "8.0",
    )
    assert (found["dra"].gpus, found["dra"].dra, found["dra"].gpu_memory) == (2, True, 80 * 2**30)
    types, members = node_types(list(found.values()))
    assert members["k8s-8c-32g"] == ("cpu-0", "cpu-1", "gputaint")
    assert members["a100"] == ("a100",) and members["dra"] == ("dra",)
    by_name = {t["name"]: t for t in types}
    assert by_name["dra"]["gpus"]["computeCapability"] == "9.0" and by_name["k8s-8c-32g"]["count"] == 3


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"image_pull_policy": "Sometimes"}, "image_pull_policy='Sometimes' is not one of"),
        ({"nodes": 3}, "unknown key"),
        ({"claim": "w"}, "claim needs claim_root"),
        ({"stop_timeout": "soon"}, "stop_timeout='soon' is not whole seconds"),
        ({"submit_threads": "many"}, "submit_threads='many' is not a whole number of threads"),
        ({"submit_threads": 0}, "submit_threads=0: give 1 or more"),
    ],
    ids=["pull-policy", "unknown", "claim-root", "timeout", "threads-word", "threads-none"],
)
def test_bad_settings_are_named(given: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        KubernetesSettings.from_mapping(given)


def test_an_evicted_pod_is_a_node_fault_even_before_its_job_fails() -> None:
    evicted = pod(
        "Failed",
        {"terminated": {"exitCode": 143, "reason": "Error"}},
        conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
    )
    s = pod_state("j", evicted)
    assert s.node_failed and s.exit_code == 255 and "EvictionByEvictionAPI" in s.reason
    assert job_state("j", {"status": {}}, [evicted]).node_failed


def test_pods_without_network_are_selected_by_the_namespaces_one_deny_all_policy() -> None:
    from hetflow.kube import network_policy

    policy = network_policy()
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy["spec"]
    closed = kube_job(job_objects(job(), KubernetesSettings(), Placement()))["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= closed.items()
    networked = ContainerSpec(**{**SPEC.__dict__, "network": True})
    opened = kube_job(job_objects(job(container=networked), KubernetesSettings(), Placement()))
    assert not selector.items() <= opened["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (pod("Pending", None, ""), "Pending: not scheduled yet"),
        (pod("Pending", {"waiting": {"reason": "ContainerCreating"}}), "ContainerCreating"),
        (pod("Running", {"running": {}}), "ContainerCreating"),
    ],
    ids=["unscheduled", "creating", "running-without-start"],
)
def test_a_pod_not_yet_started_always_says_why(p: dict[str, Any], reason: str) -> None:
    """The runner counts a job reported running with no reason as started now: a pod whose
    container has not started must never read so (its start would be the executor's clock)."""
    s = pod_state("j", p)
    assert (s.running, s.status, s.reason, s.started) == (True, "PENDING", reason, None)


def test_a_gang_let_go_whose_pods_are_not_made_yet_keeps_its_room() -> None:
    """The admission race seen in the suite: gang A un-suspended at one poll, its pods not made
    yet at the next; its room must still count, or gang B is admitted over it."""
    from hetflow.execute.backends.kubernetes.admission import fits, free_room, starting

    gpu_pod = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}}}]}

    def gang(name: str, **extra: Any) -> dict[str, Any]:
        meta = {"name": name, **extra.pop("metadata", {})}
        return {"metadata": meta, "spec": {"completions": 3, "template": {"spec": gpu_pod}, **extra}}

    a = gang("a")
    jobs = [
        a,
        gang("held", suspend=True),
        {**gang("done"), "status": {"conditions": [{"type": "Complete", "status": "True"}]}},
        gang("going", metadata={"deletionTimestamp": "2026-11-27T00:00:00Z"}),
        gang("full"),
    ]
    pods = {"a": [{"metadata": {"name": "a-0"}}], "full": [{}, {}, {}]}
    assert [(j["metadata"]["name"], n) for j, n in starting(jobs, pods)] == [("a", 2)]
    nodes = [{"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "4", "cpu": "16"},
              "conditions": [{"type": "Ready", "status": "True"}]}}]  # fmt: skip
    running = [{"metadata": {"name": "a-0"}, "spec": {"nodeName": "n", **gpu_pod}, "status": {"phase": "Running"}}]
    need = {"nvidia.com/gpu": 1.0, "cpu": 1.0}
    room = free_room(nodes, running)
    assert fits({k: dict(v) for k, v in room.items()}, need, 3, ())  # a's missing pods not counted: B fits
    for _, missing in starting(jobs, pods):
        fits(room, need, missing, ())
    assert not fits(room, need, 3, ())  # counted: one GPU left, B waits
