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
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.cwlkit import HINT, hetflow, model_lines, write_workflow
from tests.integration.hfkit import Hetflow, write
from tests.integration.kube_fixture import REAL_NODE, RealKube, kube_real  # noqa: F401  (module fixture)
from tests.integration.test_backend_kubernetes import _jobs_seen
from tests.integration.test_cwl_rerun import WORKFLOW
from tests.integration.test_run_kubernetes import core_api, jobs

pytestmark = pytest.mark.integration
GPU = "nvidia.com/gpu"


def _advertise_gpu(real: RealKube) -> None:
    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"}]
    core_api(real.cluster).patch_node_status(REAL_NODE, patch)  # a list: sent as a JSON patch


def _config(tmp_path: Path, real: RealKube) -> str:
    settings = {
        "backend": "kubernetes",
        "workdir": str(tmp_path / "work"),
        "kubernetes": {"kubeconfig": str(real.cluster.kubeconfig), "image_pull_policy": "Never", "stop_timeout": 1},
    }
    return write(tmp_path, yaml.safe_dump(settings), "config.yaml")


def _limits(job: object) -> dict[str, str]:
    return dict(job.spec.template.spec.containers[0].resources.limits or {})  # type: ignore[attr-defined]


def test_the_cwl_jobs_run_as_kubernetes_jobs_the_cuda_one_with_its_gpu_limit(
    hf: Hetflow,
    tmp_path: Path,
    kube_real: RealKube,  # noqa: F811
) -> None:
    _advertise_gpu(kube_real)
    config = _config(tmp_path, kube_real)
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


def test_stop_deletes_the_running_job_and_resume_finishes_the_run(
    hf: Hetflow,
    tmp_path: Path,
    kube_real: RealKube,  # noqa: F811
) -> None:
    """test_cwl_rerun's workflow (``second`` sleeps for its ``wait`` input) as Kubernetes Jobs:
    ``hetflow stop`` while ``second``'s pod runs ends the runner and deletes that Job; resume
    (the job order rewritten to wait 0) takes ``first`` from the cache and runs ``second``
    again as attempt 2."""
    config = _config(tmp_path, kube_real)
    (tmp_path / "wf.cwl").write_text(WORKFLOW.replace("class: Workflow\n", HINT))
    (tmp_path / "job.json").write_text(json.dumps({"wait": "300"}))
    cmd = [sys.executable, "-m", "hetflow.cli.main", "run", "-q", "--config", config, "wf.cwl", "job.json"]
    proc = subprocess.Popen(cmd, env=hf.env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    core = core_api(kube_real.cluster)

    def running_pods(run_id: str) -> list[str]:
        pods = core.list_namespaced_pod("default", label_selector=f"hetflow.run={run_id}").items
        return [p.metadata.labels["hetflow.step"] for p in pods if p.status.phase == "Running"]

    try:
        hf.wait_for(lambda: (hf.home / "state.db").exists() and bool(json.loads(hf("ps", "--all", "--json").stdout)))
        run_id = hf.last_run()
        hf.wait_for(lambda: running_pods(run_id) == ["second"], timeout=120)
        assert f"run {run_id} stopped (1 container(s))" in hf("stop", run_id).stdout
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    hf.wait_for(lambda: jobs(kube_real.cluster, run_id) == [])  # the Job (and so its pod) deleted
    assert hf.show(run_id)["state"] == "stopped"
    (tmp_path / "job.json").write_text(json.dumps({"wait": "0"}))
    hf("resume", "-q", run_id, timeout=300)
    assert (tmp_path / "b.txt").read_text() == "first\n"
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert steps["first"]["reason"] == f"CWL job first: cached from run {run_id}"
    assert (steps["second"]["state"], steps["second"]["attempts"]) == ("succeeded", 2)
