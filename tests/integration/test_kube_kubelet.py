"""A real node: containerd and a kubelet (demo/kube/kubelet.py) join the test control plane
(demo/kube/cluster.py, without kwok nodes: kube_fixture.real_kube) and run a pod of hetflow's
busybox image as a real container, with the hardening hetflow's steps get.  No skip: where the
node cannot start, the test fails with why."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from demo.images import build_examples
from kubernetes import client

from tests.integration.kube_fixture import REAL_NODE, RealKube, api_client, real_kube

pytestmark = pytest.mark.integration
NODE = REAL_NODE


@dataclass
class Cluster:
    real: RealKube
    api: Any  # kubernetes.client.CoreV1Api (the client is untyped)
    batch: Any  # kubernetes.client.BatchV1Api


@pytest.fixture(scope="module")
def numpy_image() -> str:
    """The examples' NumPy image (built once; found up to date in a second or so after)."""
    return build_examples(Path(__file__).resolve().parents[2] / "examples", gpu=False, mpi=False, log=lambda _: None)[1]


@pytest.fixture(scope="module")
def cluster(busybox: str, numpy_image: str) -> Iterator[Cluster]:
    with real_kube((busybox, numpy_image), prefix="hfkubelet-") as real:
        api = api_client(real.cluster.kubeconfig)
        yield Cluster(real, client.CoreV1Api(api), client.BatchV1Api(api))


def _hardened_pod(name: str, image: str, host_dir: Path, script: str) -> dict[str, Any]:
    """A pod as hetflow hardens a step's container, with ``host_dir`` at /out (hostPath)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",  # no registry: containerd has it imported
                    "command": ["sh", "-c", script],
                    "securityContext": {
                        "readOnlyRootFilesystem": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                }
            ],
            "volumes": [{"name": "out", "hostPath": {"path": str(host_dir), "type": "Directory"}}],
        },
    }


def _finished(api: Any, name: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while (pod := api.read_namespaced_pod(name, "default")).status.phase not in ("Succeeded", "Failed"):
        assert time.monotonic() < deadline, f"pod {name} still {pod.status.phase} after {timeout} s: {pod.status}"
        time.sleep(0.2)
    return pod


def test_hardened_pod_runs_as_a_real_container(cluster: Cluster, busybox: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    status = "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status"
    script = f"id -u > /out/who; {status}; touch /x 2>/dev/null || echo ro; exit 3"
    cluster.api.create_namespaced_pod("default", _hardened_pod("hardened", busybox, out, script))
    pod = _finished(cluster.api, "hardened")
    state = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, state.exit_code, state.reason) == ("Failed", 3, "Error")
    assert (out / "who").read_text().strip() == "1000"
    log = cluster.api.read_namespaced_pod_log("hardened", "default", container="main")
    assert log.split() == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1", "Seccomp:", "2", "ro"], log


def test_a_job_of_the_numpy_example_image_is_scheduled_and_runs(cluster: Cluster, numpy_image: str) -> None:
    """kube-scheduler places the Job's pod by its node selector; the Job controller sees it
    succeed; NumPy computed inside the example image."""
    code = "import numpy; print('sum', int(numpy.arange(10).sum()))"
    template = _hardened_pod("unused", numpy_image, Path("/unused"), "")["spec"]
    del template["nodeName"], template["volumes"], template["containers"][0]["volumeMounts"]
    template["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    template["containers"][0]["command"] = ["python3", "-c", code]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "numpy"},
           "spec": {"backoffLimit": 0, "template": {"spec": template}}}  # fmt: skip
    cluster.batch.create_namespaced_job("default", job)
    deadline = time.monotonic() + 90
    while not ((status := cluster.batch.read_namespaced_job("numpy", "default").status).succeeded or status.failed):
        assert time.monotonic() < deadline, f"job numpy not done after 90 s: {status}"
        time.sleep(0.2)
    assert (status.succeeded, status.failed) == (1, None)
    (pod,) = cluster.api.list_namespaced_pod("default", label_selector="job-name=numpy").items
    assert pod.spec.node_name == NODE
    assert cluster.api.read_namespaced_pod_log(pod.metadata.name, "default") == "sum 45\n"
