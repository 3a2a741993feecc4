"""The Kubernetes backend on a real node: the control plane of kube_fixture and one real
kubelet with containerd (demo/kube_kubelet.py), so each job is a real container of the
busybox image; the backend contract (tests/contract/backend_contract.py) holds as for local
podman, Slurm and Ray.  Not here: the gang contract (an Indexed Job runs one command on every
replica, and the contract gives each replica its own; a torch gang runs on kwok nodes in
test_run_kubernetes.py) and the node-failure contract (evictions: test_run_kubernetes.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from hetflow.execute.backends.kubernetes import KubernetesBackend
from tests.contract.backend_contract import BackendContract
from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.kube_fixture import REAL_NODE, RealKube, kube_real

__all__ = ["kube_real"]  # the module-scoped cluster fixture, used below


@pytest.fixture(scope="module")
def backend(kube_real: RealKube) -> KubernetesBackend:
    return KubernetesBackend(kube_real.settings())


@pytest.fixture
def fresh_backend(kube_real: RealKube) -> KubernetesBackend:
    return KubernetesBackend(kube_real.settings())


class TestKubernetesBackend(BackendContract):
    def test_capabilities(self, backend: KubernetesBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == (
            "kubernetes",
            False,
            True,
            True,
        )


DATA_WF = f"""apiVersion: hetflow/v1
name: kubedata
data:
  docs: inputs/*.txt
steps:
  count:
    image: {BUSYBOX}
    foreach: {{files: data.docs}}
    inputs: {{doc: "{{{{ item.path }}}}"}}
    command: [sh, -c, "wc -w < /in/doc/{{{{ item.name }}}} > /out/n; id -u; echo counted {{{{ item.name }}}}"]
    resources: {{cpus: 0.5, memory: 128Mi}}
    outputs: [n]
  total:
    image: {BUSYBOX}
    inputs: {{counts: count/n}}
    command: [sh, -c, "t=0; for f in /in/counts/*/n; do t=$((t + $(cat $f))); done; echo $t > /out/total"]
    resources: {{cpus: 0.5, memory: 128Mi}}
    outputs: [total]
    publish: {{to: results}}
"""


def test_a_workflow_with_data_runs_in_real_containers_and_publishes(
    hf: Hetflow, tmp_path: Path, kube_real: RealKube
) -> None:
    """Host files fanned out, gathered and published, every step a real pod on the real node;
    the work directory is a hostPath at the same path (one node: no shared file system needed)."""
    (tmp_path / "inputs").mkdir()
    for name, words in (("a.txt", "one two three"), ("b.txt", "four five")):
        (tmp_path / "inputs" / name).write_text(words + "\n")
    config = write(
        tmp_path,
        yaml.safe_dump(
            {
                "backend": "kubernetes",
                "workdir": str(tmp_path / "work"),
                "kubernetes": {"kubeconfig": str(kube_real.cluster.kubeconfig), "image_pull_policy": "Never"},
            }
        ),
        "config.yaml",
    )
    hf("run", "-q", "--config", config, write(tmp_path, DATA_WF), timeout=300)
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert data["state"] == "succeeded", data
    assert {s["node"] for s in data["steps"]} == {REAL_NODE}
    assert (tmp_path / "results" / "total").read_text().strip() == "5"
    log = hf("logs", run_id, "count").stdout
    assert "counted a.txt" in log and "counted b.txt" in log
    assert f"count.0 | {os.getuid()}\n" in log  # the submitter's UID, as on one machine
