"""kill -9 of `hetflow run`, `hetflow stop`, then `hetflow resume`: nothing done twice."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, podman, run_containers, step_out, write


def _chain(n: int, sleep: float, slow: dict[int, float] | None = None) -> str:
    steps = []
    for i in range(n):
        pause = (slow or {}).get(i, sleep)
        needs = f"\n    needs: [s{i - 1}]" if i else ""
        steps.append(f"""
  s{i}:{needs}
    image: {BUSYBOX}
    command: [sh, -c, "sleep {pause}; echo $HETFLOW_ATTEMPT > /out/done"]
    outputs: [done]""")
    return "apiVersion: hetflow/v1\nname: chain\nsteps:" + "".join(steps) + "\n"


def _step_states(hf: Hetflow, run_id: str) -> dict[str, str]:
    return {s["step"]: s["state"] for s in hf.show(run_id)["steps"]}


def _started(hf: Hetflow, run_id: str, step: str) -> bool:
    """The step is running and its container has started: a step is "running" from its attached
    `podman run`'s launch, and an executor killed before podman has started the container may take
    the start with it (a fast poll on a loaded machine killed it there)."""
    if _step_states(hf, run_id)[step] != "running":
        return False
    name = f"hf-{run_id}-{step}-1"
    started = ("--filter", "status=running", "--filter", "status=exited")  # either, not "created"
    return podman("ps", "-a", "--filter", f"name=^{name}$", *started, "--format", "{{.Names}}") == [name]


def test_kill9_then_resume_adopts_running_container_and_runs_nothing_twice(hf: Hetflow, tmp_path: Path) -> None:
    # s1 runs long enough to outlive the kill and the resume's start-up, even on a loaded machine
    proc = hf.popen("run", write(tmp_path, _chain(4, 0.5, slow={1: 8.0})), "-q")
    hf.wait_for(lambda: (hf.home / "state.db").exists() and bool(json.loads(hf("ps", "--json").stdout)))
    run_id = hf.last_run()
    hf.wait_for(lambda: _started(hf, run_id, "s1"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # the executor is gone; its container goes on without it (s0's, finished, waits for its
    # batch removal: the resume removes it)
    assert run_containers(run_id, running=True) == [f"hf-{run_id}-s1-1"]
    assert set(run_containers(run_id)) <= {f"hf-{run_id}-s0-1", f"hf-{run_id}-s1-1"}
    assert json.loads(hf("ps", "--json").stdout)[0]["state"] == "running"

    hf("resume", run_id, "-q")
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    for s in data["steps"]:
        assert s["attempts"] == 1, f"step {s['step']} ran {s['attempts']} times"
        assert (step_out(hf, run_id, s["step"]) / "done").read_text().strip() == "1"
    assert run_containers(run_id) == []
    assert f"adopted running container hf-{run_id}-s1-1" in _events(hf, run_id)


def test_kill9_then_container_finishes_while_down_exit_code_collected(hf: Hetflow, tmp_path: Path) -> None:
    proc = hf.popen("run", write(tmp_path, _chain(2, 0.5, slow={0: 3.0})), "-q")
    hf.wait_for(lambda: (hf.home / "state.db").exists() and bool(json.loads(hf("ps", "--json").stdout)))
    run_id = hf.last_run()
    hf.wait_for(lambda: _started(hf, run_id, "s0"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    hf.wait_for(
        lambda: run_containers(run_id) == [f"hf-{run_id}-s0-1"] and not run_containers(run_id, running=True), timeout=30
    )
    hf("resume", run_id, "-q")
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert [s["attempts"] for s in data["steps"]] == [1, 1]
    events = _events(hf, run_id)
    assert any("finished while hetflow was down (exit 0)" in e for e in events)


def _events(hf: Hetflow, run_id: str) -> list[str]:
    import sqlite3

    db = sqlite3.connect(hf.home / "state.db")
    return [row[0] for row in db.execute("SELECT message FROM events WHERE run_id = ?", (run_id,))]


def test_stop_then_resume(hf: Hetflow, tmp_path: Path) -> None:
    run_id = hf("run", "--detach", write(tmp_path, _chain(2, 1.0, slow={0: 8.0}))).stdout.strip()
    hf.wait_for(lambda: _step_states(hf, run_id)["s0"] == "running")
    # --grace 0: s0's sh (PID 1) ignores SIGTERM, and within the default 10 s grace its sleep 8
    # would end with its output written: a success, kept, since issue 37 (not run again)
    out = hf("stop", run_id, "--grace", "0").stdout
    assert f"run {run_id} stopped (1 container(s))" in out
    data = hf.show(run_id)
    assert data["state"] == "stopped"
    assert _step_states(hf, run_id) == {"s0": "stopped", "s1": "pending"}
    assert run_containers(run_id) == []
    hf("resume", run_id, "-q")
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    assert [s["attempts"] for s in data["steps"]] == [2, 1]  # s0 was stopped once, then ran again


def _fail_and_tamper(hf: Hetflow, run_id: str) -> None:
    import sqlite3

    db = sqlite3.connect(hf.home / "state.db")
    db.execute("UPDATE runs SET state = 'failed' WHERE id = ?", (run_id,))
    db.commit()
    (step_out(hf, run_id, "s1") / "done").write_text("tampered\n")


def test_resume_restores_a_damaged_output_from_the_cache(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", write(tmp_path, _chain(3, 0)), "-q")
    run_id = hf.last_run()
    original = (step_out(hf, run_id, "s1") / "done").read_text()
    _fail_and_tamper(hf, run_id)
    proc = hf("resume", run_id, "-q")
    assert "re-running s1, s2" in proc.stderr
    steps = hf.show(run_id)["steps"]
    assert [s["attempts"] for s in steps] == [1, 1, 1]  # nothing ran again: the cache held s1 and s2
    assert [s["reason"].startswith("cached: from run") for s in steps] == [False, True, True]
    assert (step_out(hf, run_id, "s1") / "done").read_text() == original


def test_resume_reruns_a_step_whose_output_was_damaged(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", write(tmp_path, _chain(3, 0)), "-q", "--no-cache")
    run_id = hf.last_run()
    # a succeeded run is not resumed...
    assert "already succeeded" in hf("resume", run_id).stdout
    # ...but a failed one whose recorded outputs changed re-runs them and what follows
    import sqlite3

    db = sqlite3.connect(hf.home / "state.db")
    db.execute("UPDATE runs SET state = 'failed' WHERE id = ?", (run_id,))
    db.commit()
    (step_out(hf, run_id, "s1") / "done").write_text("tampered\n")
    proc = hf("resume", run_id, "-q")
    assert "re-running s1, s2" in proc.stderr
    assert [s["attempts"] for s in hf.show(run_id)["steps"]] == [1, 2, 2]
    assert (step_out(hf, run_id, "s1") / "done").read_text().strip() == "2"
