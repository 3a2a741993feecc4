"""The local Kubernetes test cluster itself (demo/kube/cluster.py), checked with the official
Python client: nodes and their capacity, the real kube-scheduler placing device-plugin and DRA
GPU requests, the test convention's outcomes played by kwok's stages, pod logs served through
the API server, and RBAC refusing the restricted identity."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from demo.kube.cluster import DEFAULT_NODES, LocalKube
from demo.kube.objects import KwokNode
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.kube_fixture import api_client, kube_cluster, wait_for

__all__ = ["kube_cluster"]  # the module-scoped cluster fixture, used below

NS = "default"
_names = itertools.count()


@pytest.fixture(scope="module")
def core(kube_cluster: LocalKube) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(kube_cluster.kubeconfig))


def _pod(name: str, resources: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": resources or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def _t4_affinity() -> dict[str, Any]:
    """Node affinity on GPU Feature Discovery's product label, as hetflow's export writes it."""
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize("node", DEFAULT_NODES, ids=[n.name for n in DEFAULT_NODES])
def test_node_ready_with_its_capacity(core: client.CoreV1Api, node: Any) -> None:
    got = core.read_node(node.name)
    ready = {c.type: c.status for c in got.status.conditions}
    assert ready["Ready"] == "True"
    assert got.status.capacity["cpu"] == str(node.cpus)
    assert got.status.allocatable.get("nvidia.com/gpu") == (
        str(node.extended["nvidia.com/gpu"]) if node.extended else None
    )
    assert {k: got.metadata.labels.get(k) for k in node.labels} == dict(node.labels)


def test_scheduler_places_device_plugin_gpus_by_gfd_label(core: client.CoreV1Api) -> None:
    fits, too_big = f"t4-two-{next(_names)}", f"t4-three-{next(_names)}"
    core.create_namespaced_pod(NS, _pod(fits, {"limits": {"nvidia.com/gpu": "2"}}, affinity=_t4_affinity()))
    core.create_namespaced_pod(NS, _pod(too_big, {"limits": {"nvidia.com/gpu": "3"}}, affinity=_t4_affinity()))
    try:
        placed = wait_for(
            "2 T4 running", lambda: (p := core.read_namespaced_pod(fits, NS)).status.phase == "Running" and p
        )
        assert placed.spec.node_name == "kwok-t4"

        def unschedulable() -> Any:
            conds = core.read_namespaced_pod(too_big, NS).status.conditions or []
            return next((c for c in conds if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

        cond = wait_for("the scheduler's reason for 3 T4", unschedulable)
        assert "Insufficient nvidia.com/gpu" in cond.message
        assert core.read_namespaced_pod(too_big, NS).status.phase == "Pending"
    finally:
        for name in (fits, too_big):
            core.delete_namespaced_pod(name, NS)


def test_dra_claim_is_allocated_a_device_of_the_dra_node(kube_cluster: LocalKube, core: client.CoreV1Api) -> None:
    resource = client.ResourceV1Api(api_client(kube_cluster.kubeconfig))
    attrs, cap = 'device.attributes["gpu.nvidia.com"]', 'device.capacity["gpu.nvidia.com"]'
    selectors = [
        f'{attrs}.productName == "NVIDIA H100 80GB HBM3"',
        f'{attrs}.cudaComputeCapability.compareTo(semver("9.0.0")) >= 0',
        f'{cap}.memory.compareTo(quantity("40Gi")) >= 0',
    ]
    name = f"h100-{next(_names)}"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [{"cel": {"expression": e}} for e in selectors],
                        },
                    }
                ]
            }
        },
    }
    resource.create_namespaced_resource_claim(NS, claim)
    pod = _pod(name, {"claims": [{"name": "gpu"}]}, resourceClaims=[{"name": "gpu", "resourceClaimName": name}])
    core.create_namespaced_pod(NS, pod)
    try:
        placed = wait_for(
            "the DRA pod running", lambda: (p := core.read_namespaced_pod(name, NS)).status.phase == "Running" and p
        )
        assert placed.spec.node_name == "kwok-h100-dra"
        allocation = resource.read_namespaced_resource_claim(name, NS).status.allocation
        (result,) = allocation.devices.results
        assert (result.driver, result.pool, result.device) in {
            ("gpu.nvidia.com", "kwok-h100-dra", "gpu-0"),
            ("gpu.nvidia.com", "kwok-h100-dra", "gpu-1"),
        }
    finally:
        core.delete_namespaced_pod(name, NS)
        resource.delete_namespaced_resource_claim(name, NS)


# (hetflow.step, hetflow.attempt) -> the Job's end, and its pod's container: exit code, reason
OUTCOMES = [
    ("default", "1", "Complete", 0, "Completed"),
    ("fails", "1", "Failed", 3, "Error"),
    ("flaky", "1", "Failed", 3, "Error"),
    ("flaky", "2", "Complete", 0, "Completed"),
    ("oom", "1", "Failed", 137, "OOMKilled"),
]


def _job(name: str, step: str, attempt: str) -> dict[str, Any]:
    labels = {"hetflow.step": step, "hetflow.attempt": attempt, "hetflow.job": name}
    template = {"metadata": {"labels": labels}, "spec": {"restartPolicy": "Never", **_pod(name)["spec"]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"backoffLimit": 0, "template": template},
    }


@pytest.mark.parametrize(
    ("step", "attempt", "end", "exit_code", "reason"), OUTCOMES, ids=[f"{o[0]}-{o[1]}" for o in OUTCOMES]
)
def test_job_ends_as_the_convention_says(
    kube_cluster: LocalKube, core: client.CoreV1Api, step: str, attempt: str, end: str, exit_code: int, reason: str
) -> None:
    batch = client.BatchV1Api(api_client(kube_cluster.kubeconfig))
    name = f"hf-{step}-{attempt}-{next(_names)}"
    batch.create_namespaced_job(NS, _job(name, step, attempt))

    def ended() -> str | None:
        conds = batch.read_namespaced_job(name, NS).status.conditions or []
        return next((c.type for c in conds if c.type in ("Complete", "Failed") and c.status == "True"), None)

    assert wait_for(f"job {name} ended", ended) == end
    (pod,) = core.list_namespaced_pod(NS, label_selector=f"hetflow.job={name}").items
    (status,) = pod.status.container_statuses
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (exit_code, reason)
    batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")


def test_holds_runs_until_deleted_and_serves_its_log(kube_cluster: LocalKube, core: client.CoreV1Api) -> None:
    batch = client.BatchV1Api(api_client(kube_cluster.kubeconfig))
    name = f"hf-holds-{next(_names)}"
    batch.create_namespaced_job(NS, _job(name, "holds", "1"))
    selector = f"hetflow.job={name}"

    def running() -> Any:
        pods = core.list_namespaced_pod(NS, label_selector=selector).items
        return pods and pods[0].status.phase == "Running" and pods[0]

    pod = wait_for("the holds pod running", running)
    # through the API server to kwok's log server, the node's "kubelet"
    assert core.read_namespaced_pod_log(pod.metadata.name, NS) == "kwok: a simulated container (it ran nothing)\n"
    assert core.read_namespaced_pod(pod.metadata.name, NS).status.phase == "Running"  # still: it holds
    batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")
    wait_for("the holds pod gone", lambda: not core.list_namespaced_pod(NS, label_selector=selector).items)


def test_restricted_identity_is_refused_a_job(kube_cluster: LocalKube) -> None:
    restricted = api_client(kube_cluster.restricted_kubeconfig)
    assert client.CoreV1Api(restricted).list_namespaced_pod(NS).items is not None  # what it may do
    with pytest.raises(ApiException) as refused:
        client.BatchV1Api(restricted).create_namespaced_job(NS, _job("hf-forbidden", "default", "1"))
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert 'User "hf-restricted" cannot create resource "jobs"' in message


def test_add_node_with_dra_gpus_then_delete_it(kube_cluster: LocalKube, core: client.CoreV1Api) -> None:
    resource = client.ResourceV1Api(api_client(kube_cluster.kubeconfig))
    node = KwokNode("kwok-l4-added", cpus=4, dra_gpus=(("NVIDIA L4", "Ada Lovelace", "8.9", "550.54.15", "24Gi"),))
    kube_cluster.add_node(node)  # returns once Ready

    def slice_of(name: str) -> Any:
        return [s for s in resource.list_resource_slice().items if s.spec.node_name == name]

    (published,) = slice_of(node.name)
    (device,) = published.spec.devices
    assert device.attributes["cudaComputeCapability"].version == "8.9.0"
    assert node.name in {n.name for n in kube_cluster.nodes}
    kube_cluster.delete_node(node.name)
    # the garbage collector removes the slice with its owner, the Node, as a kubelet's
    wait_for("the deleted node's ResourceSlice gone", lambda: not slice_of(node.name))
    assert node.name not in {n.metadata.name for n in core.list_node().items}
