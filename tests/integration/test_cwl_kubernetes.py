"""The CUDA+CPU CWL workflow (``cwlkit``) through ``hetflow run x.cwl --config`` (backend:
kubernetes) on the test control plane with one real node (containerd and a kubelet:
``kube_fixture.kube_real``): each CWL job is a Kubernetes Job whose pod runs as a real
container there, its files through hostPath mounts of cwltool's own folders.

The real node has no GPU.  So that the CUDA job's pod can be scheduled at all, the node is
made to advertise one ``nvidia.com/gpu`` as an extended resource (a PATCH of its status, as
Kubernetes documents for extended resources): the scheduler then places the pod by its
``nvidia.com/gpu: 1`` limit, and the kubelet, which has no device plugin for it, runs it
without a device.  What the test shows for the GPU is the limit on the Job hetflow submitted
and the placement by it, never a GPU given to the container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.cwlkit import hetflow, model_lines, write_workflow
from tests.integration.hfkit import Hetflow, write
from tests.integration.kube_fixture import REAL_NODE, RealKube, kube_real  # noqa: F401  (module fixture)
from tests.integration.test_backend_kubernetes import _jobs_seen
from tests.integration.test_run_kubernetes import core_api

pytestmark = pytest.mark.integration
GPU = "nvidia.com/gpu"


def _advertise_gpu(real: RealKube) -> None:
    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"}]
    core_api(real.cluster).patch_node_status(REAL_NODE, patch)  # a list: sent as a JSON patch


def _limits(job: object) -> dict[str, str]:
    return dict(job.spec.template.spec.containers[0].resources.limits or {})  # type: ignore[attr-defined]


def test_the_cwl_jobs_run_as_kubernetes_jobs_the_cuda_one_with_its_gpu_limit(
    hf: Hetflow,
    tmp_path: Path,
    kube_real: RealKube,  # noqa: F811
) -> None:
    _advertise_gpu(kube_real)
    settings = {
        "backend": "kubernetes",
        "workdir": str(tmp_path / "work"),
        "kubernetes": {"kubeconfig": str(kube_real.cluster.kubeconfig), "image_pull_policy": "Never",
                       "stop_timeout": 1},
    }  # fmt: skip
    config = write(tmp_path, yaml.safe_dump(settings), "config.yaml")
    workflow = write_workflow(tmp_path)
    with _jobs_seen(kube_real) as seen:
        proc = hetflow(tmp_path, hf.env, "run", "-q", "--config", config, str(workflow), str(tmp_path / "inputs.yml"))
    model = model_lines(proc)
    # the CPU job's real container ran (its line and its count of GPU devices: none), and the
    # CUDA job's read its output on the same node: no device node, as the node has no GPU
    assert model[-2:] == ["0", "prepared 7"], model
    by_step = {job.metadata.labels["hetflow.step"]: job for job in seen.values()}
    assert _limits(by_step["train"]).get(GPU) == "1", _limits(by_step["train"])
    assert GPU not in _limits(by_step["prep"]), _limits(by_step["prep"])
    run = json.loads(hf("ps", "--all", "--json").stdout)[0]
    shown = hf.show(run["id"])
    assert shown["state"] == "succeeded", shown
    assert {s["step"]: s["node"] for s in shown["steps"]} == {"prep": REAL_NODE, "train": REAL_NODE}
