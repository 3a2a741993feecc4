"""``hetflow stop`` and ``hetflow resume`` of a CWL run (``hetflow.cwl.control``), on this
machine's podman: stop ends the cwl-runner and its job's container and records the run
stopped; resume runs the same CWL file and job order again as the same run, the finished job
from the cache, the stopped one as its next attempt.  After ``kill -9`` of the runner, resume
first stops the container it left running.  The workflow is test_cwl_rerun's (``second``
sleeps for its ``wait`` input); before resuming, the test rewrites the job order to wait 0,
which resume reads again as a rerun would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cwlkit import HINT
from tests.integration.hfkit import Hetflow
from tests.integration.test_cwl_rerun import WORKFLOW

pytestmark = pytest.mark.integration


def _running(run_id: str) -> list[str]:
    cmd = ["podman", "ps", "-q", "--filter", f"label=hetflow.run={run_id}", "--filter", "status=running"]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.split()


@pytest.fixture
def started(hf: Hetflow, tmp_path: Path, busybox: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``hetflow run wf.cwl job.json`` in the background (in tmp_path, where its outputs go),
    once its ``second`` job's container runs; killed and its containers removed after."""
    (tmp_path / "wf.cwl").write_text(WORKFLOW.replace("class: Workflow\n", HINT))
    (tmp_path / "job.json").write_text(json.dumps({"wait": "300"}))
    cmd = [sys.executable, "-m", "hetflow.cli.main", "run", "-q", "wf.cwl", "job.json"]
    proc = subprocess.Popen(cmd, env=hf.env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = ""
    try:
        hf.wait_for(lambda: (hf.home / "state.db").exists() and bool(json.loads(hf("ps", "--all", "--json").stdout)))
        run_id = hf.last_run()
        hf.wait_for(lambda: hf.step_states(run_id).get("second") == "running" and bool(_running(run_id)))
        yield proc, run_id
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=hetflow.run={run_id}"],
                             capture_output=True, text=True, check=False).stdout.split()  # fmt: skip
        if run_id and ids:
            subprocess.run(["podman", "rm", "-f", "-t", "0", *ids], capture_output=True, check=False)


def _resume(hf: Hetflow, tmp_path: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.json").write_text(json.dumps({"wait": "0"}))
    cmd = [sys.executable, "-m", "hetflow.cli.main", "resume", "-q", run_id]
    return subprocess.run(cmd, env=hf.env, cwd="/", capture_output=True, text=True, timeout=240, check=False)


def _attempts(hf: Hetflow, run_id: str) -> dict[str, int]:
    return {s["step"]: s["attempts"] for s in hf.show(run_id)["steps"]}


def test_stop_ends_the_runner_and_its_container_and_resume_finishes_the_run(
    hf: Hetflow, tmp_path: Path, started: tuple[subprocess.Popen[str], str]
) -> None:
    proc, run_id = started
    out = hf("stop", run_id).stdout
    assert f"run {run_id} stopped (1 container(s))" in out, out
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert _running(run_id) == []
    shown = hf.show(run_id)
    assert shown["state"] == "stopped"
    assert {s["step"]: s["state"] for s in shown["steps"]} == {"first": "succeeded", "second": "stopped"}
    again = _resume(hf, tmp_path, run_id)
    assert again.returncode == 0, again.stderr
    assert Path(json.loads(again.stdout)["b"]["path"]) == tmp_path / "b.txt"  # in the folder it first ran in
    assert (tmp_path / "b.txt").read_text() == "first\n"
    shown = hf.show(run_id)
    assert shown["state"] == "succeeded"
    steps = {s["step"]: s for s in shown["steps"]}
    assert steps["first"]["reason"] == f"CWL job first: cached from run {run_id}"
    assert (steps["second"]["state"], steps["second"]["attempts"]) == ("succeeded", 2)
    assert len(json.loads(hf("ps", "--all", "--json").stdout)) == 1  # the same run, no new one


def test_resume_after_kill_9_stops_the_left_container_first(
    hf: Hetflow, tmp_path: Path, started: tuple[subprocess.Popen[str], str]
) -> None:
    proc, run_id = started
    left = _running(run_id)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _running(run_id) == left  # the killed runner's container sleeps on
    again = _resume(hf, tmp_path, run_id)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "b.txt").read_text() == "first\n"
    assert not set(left) & set(_running(run_id))
    assert hf.show(run_id)["state"] == "succeeded"
    assert _attempts(hf, run_id) == {"first": 1, "second": 2}


def test_resume_of_a_running_cwl_run_says_to_stop_it_first(
    hf: Hetflow, tmp_path: Path, started: tuple[subprocess.Popen[str], str]
) -> None:
    _, run_id = started
    proc = hf("resume", run_id, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"'hetflow stop {run_id}' first" in proc.stdout + proc.stderr
