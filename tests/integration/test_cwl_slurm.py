"""The CUDA+CPU CWL workflow (``cwlkit``) handed to the local two-node Slurm cluster with
``hetflow run x.cwl --config`` (backend: slurm, planned on the cluster file): the CUDA job,
which needs compute capability 8.0, is planned on the A100 node (the T4's is 7.5) and runs
there with one GPU through Slurm's gres and only that GPU in its container; the CPU job runs
where its plan says, with none; the store records the nodes Slurm ran them on.  The
cluster's GPUs are FAKE (mknod'd device nodes): placement and isolation, not CUDA."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from demo.slurm.cluster import CLUSTER_FILE, LocalSlurm

from tests.integration.cwlkit import HINT, hetflow, model_lines, write_workflow
from tests.integration.hfkit import Hetflow
from tests.integration.slurm_fixture import slurm_cluster, slurm_config  # noqa: F401  (module fixture)
from tests.integration.test_cwl_rerun import WORKFLOW

pytestmark = pytest.mark.integration


def test_the_cuda_job_gets_a_slurm_gpu_and_the_cpu_job_none(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    config = slurm_config(tmp_path, slurm_cluster, CLUSTER_FILE)
    workflow = write_workflow(tmp_path, cc="8.0")
    proc = hetflow(tmp_path, hf.env, "run", "--config", config, str(workflow), str(tmp_path / "inputs.yml"))
    model = model_lines(proc)
    # one fake GPU device node, numbered as on its node; inside, CUDA counts from 0
    assert len(model) == 4 and model[0].startswith("nvidia") and model[0][6:].isdigit(), model
    assert model[1:] == ["cuda=0 nv=0", "0", "prepared 7"]  # the CPU job saw no GPU
    run = json.loads(hf("ps", "--all", "--json").stdout)[0]
    shown = hf.show(run["id"])
    assert shown["state"] == "succeeded", shown
    steps = {s["step"]: s for s in shown["steps"]}
    planned = dict(re.findall(r"\[job (\w+)\] planned on ([\w-]+)", proc.stderr))
    assert planned["train"] == "hf-a100", proc.stderr
    assert (steps["train"]["node"], len(steps["train"]["gpus"])) == ("hf-a100", 1), steps["train"]
    assert (steps["prep"]["node"], steps["prep"]["gpus"]) == (planned["prep"], []), steps["prep"]


def test_resume_after_kill_9_cancels_the_left_slurm_job_and_finishes_from_the_cache(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """test_cwl_rerun's workflow (``second`` sleeps for its ``wait`` input) on Slurm: the runner
    is killed while ``second``'s Slurm job runs; resume cancels that job, takes ``first`` from
    the cache and runs ``second`` again (the job order rewritten to wait 0) as attempt 2."""
    config = slurm_config(tmp_path, slurm_cluster, CLUSTER_FILE)
    (tmp_path / "wf.cwl").write_text(WORKFLOW.replace("class: Workflow\n", HINT))
    (tmp_path / "job.json").write_text(json.dumps({"wait": "300"}))
    cmd = [sys.executable, "-m", "hetflow.cli.main", "run", "-q", "--config", config, "wf.cwl", "job.json"]
    proc = subprocess.Popen(cmd, env=hf.env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        hf.wait_for(lambda: (hf.home / "state.db").exists() and bool(json.loads(hf("ps", "--all", "--json").stdout)))
        run_id = hf.last_run()
        hf.wait_for(lambda: _slurm_jobs(slurm_cluster, run_id, "R") == [f"hf-{run_id}-second-1"], timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert _slurm_jobs(slurm_cluster, run_id, "R") == [f"hf-{run_id}-second-1"]  # it runs on without its runner
    (tmp_path / "job.json").write_text(json.dumps({"wait": "0"}))
    again = hf("resume", "-q", run_id, timeout=300)
    assert json.loads(again.stdout)["b"]["path"] == str(tmp_path / "b.txt")
    assert (tmp_path / "b.txt").read_text() == "first\n"
    assert _slurm_jobs(slurm_cluster, run_id, "R") == []
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert steps["first"]["reason"] == f"CWL job first: cached from run {run_id}"
    assert (steps["second"]["state"], steps["second"]["attempts"]) == ("succeeded", 2)


def _slurm_jobs(cluster: LocalSlurm, run_id: str, state: str) -> list[str]:
    """The names of the run's Slurm jobs in ``state`` (squeue's short code: R, PD, ...)."""
    out = subprocess.run(
        ["squeue", "--noheader", "--states=all", "--format=%j %t"],
        env={**os.environ, **cluster.env}, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return sorted(
        n for n, st in (line.split() for line in out.splitlines()) if n.startswith(f"hf-{run_id}-") and st == state
    )


def test_a_cuda_job_no_node_can_serve_is_refused_before_the_run_starts(
    hf: Hetflow,
    tmp_path: Path,
    slurm_cluster: LocalSlurm,  # noqa: F811
) -> None:
    """Compute capability 9.0: neither the A100 (8.0) nor the T4 (7.5) qualifies; the plan says
    so, nothing is submitted and no run is left in the store."""
    config = slurm_config(tmp_path, slurm_cluster, CLUSTER_FILE)
    workflow = write_workflow(tmp_path, cc="9.0")
    proc = hetflow(tmp_path, hf.env, "run", "-q", "--config", config, str(workflow), str(tmp_path / "inputs.yml"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "train" in proc.stderr and "9.0" in proc.stderr, proc.stderr
    assert json.loads(hf("ps", "--all", "--json").stdout) == []
