"""A CWL run killed with ``kill -9`` mid-way, then run again: the job that had finished comes
from hetflow's cache, the one that was running runs again, and the store says which."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

WORKFLOW = """\
cwlVersion: v1.2
class: Workflow
inputs:
  wait: string
outputs:
  b: {type: File, outputSource: second/out}
steps:
  first:
    run:
      class: CommandLineTool
      baseCommand: [sh, -c, "echo first > a.txt"]
      inputs: []
      outputs: {out: {type: File, outputBinding: {glob: a.txt}}}
    in: {}
    out: [out]
  second:
    run:
      class: CommandLineTool
      baseCommand: [sh, -c]
      arguments: ["sleep $0; cat $1 > b.txt", $(inputs.wait), $(inputs.a.path)]
      requirements: {InlineJavascriptRequirement: {}}
      inputs: {a: File, wait: string}
      outputs: {out: {type: File, outputBinding: {glob: b.txt}}}
    in: {a: first/out, wait: wait}
    out: [out]
"""


def _steps(home: Path) -> dict[str, tuple[str, str]]:
    """The store's steps; none while the runner is still making the store (its file is there
    before its tables are)."""
    try:
        with sqlite3.connect(home / "state.db") as db:
            return {r[0]: (r[1], r[2]) for r in db.execute("SELECT run_id || '/' || step, state, reason FROM steps")}
    except sqlite3.OperationalError:
        return {}


def _wait(predicate: object, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_rerun_after_kill_9_takes_the_finished_job_from_the_cache(tmp_path: Path, busybox: str) -> None:
    home = tmp_path / "home"
    (tmp_path / "wf.cwl").write_text(WORKFLOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETFLOW_")}
    env.update(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}", HETFLOW_HOME=str(home))

    def runner(wait: str, out: str) -> list[str]:
        (tmp_path / f"{out}.json").write_text(json.dumps({"wait": wait}))
        return [sys.executable, "-m", "hetflow.cwl", "--quiet", "--default-container", busybox,
                "--outdir", str(tmp_path / out), str(tmp_path / "wf.cwl"), str(tmp_path / f"{out}.json")]  # fmt: skip

    proc = subprocess.Popen(runner("300", "out1"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first_run = ""
    try:
        _wait(lambda: (home / "state.db").exists() and any(
            k.endswith("/second") and v[0] == "running" for k, v in _steps(home).items()))  # fmt: skip
        first_run = next(k.split("/")[0] for k in _steps(home))
        # and its container runs: recorded running before its `podman run` made it, a container
        # made after the kill and the removal below would sleep on past the test
        running = ["podman", "ps", "-q", "--filter", f"label=hetflow.run={first_run}", "--filter", "status=running"]
        _wait(lambda: bool(subprocess.run(running, capture_output=True, text=True, check=False).stdout.split()))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        # the killed runner's container sleeps on: hetflow's containers carry the run's label
        found = ["podman", "ps", "-aq", "--filter", f"label=hetflow.run={first_run}"]
        ids = subprocess.run(found, capture_output=True, text=True, check=False).stdout.split() if first_run else []
        if ids:
            subprocess.run(["podman", "rm", "-f", "-t", "0", *ids], capture_output=True, check=False)
    again = subprocess.run(runner("0", "out2"), env=env, capture_output=True, text=True, timeout=240, check=False)
    assert again.returncode == 0, again.stderr
    assert Path(json.loads(again.stdout)["b"]["path"]).read_text() == "first\n"
    steps = _steps(home)
    second_run = next(k.split("/")[0] for k in steps if not k.startswith(first_run))
    assert steps[f"{second_run}/first"] == ("succeeded", f"CWL job first: cached from run {first_run}")
    assert steps[f"{second_run}/second"][0] == "succeeded"


def test_a_job_that_updates_its_input_in_place_is_never_taken_from_the_cache(tmp_path: Path) -> None:
    """InplaceUpdateRequirement (the conformance suite's inp_update_wf): step2 adds one to the
    file step1 wrote, in place; run twice on one store, step2 must run again, or step3 and
    step4 read 3 instead of 4 (a rerun from the cache gave 3 and 3)."""
    suite = ROOT / "third_party" / "cwl-v1.2" / "tests"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETFLOW_")}
    env.update(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}", HETFLOW_HOME=str(tmp_path / "home"))
    for n in (1, 2):
        cmd = [sys.executable, "-m", "hetflow.cwl", "--quiet", "--outdir", str(tmp_path / f"out{n}")]
        cmd += [str(suite / "inp_update_wf.cwl"), str(suite / "empty.json")]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, check=False)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {"a": 4, "b": 4}, (n, proc.stdout)
