"""Fan-out items batched several to a container (issue 26), in real podman containers: each
item keeps its own exit code, log, outputs, cache entry and retries; a failed item runs
again alone; an executor killed with kill -9 during a batch is resumed with no item lost
or run twice; a stop keeps what the batch had finished."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

WF = f"""apiVersion: hetflow/v1
name: batched
steps:
  work:
    image: {BUSYBOX}
    foreach: {{items}}
    command: [sh, -c, "{{cmd}}"]
    resources: {{{{cpus: 0.5, memory: 32Mi}}}}
    outputs: [o.txt]
    retries: 1
    batch: {{batch}}
  gather:
    image: {BUSYBOX}
    needs: [work]
    inputs: {{{{parts: work/o.txt}}}}
    command: [sh, -c, "cat /in/parts/*/o.txt | sort -n | tr '\\\\n' ' ' > /out/all.txt"]
    resources: {{{{cpus: 0.5, memory: 32Mi}}}}
    outputs: [all.txt]
"""
# item 3 fails on its first attempt only; every item says who it is on stdout and stderr
FLAKY = (
    "echo out {{ item }}; echo err {{ item }} >&2; "
    "if [ {{ item }} = 3 ] && [ $HETFLOW_ATTEMPT = 1 ]; then exit 3; fi; echo {{ item }} > /out/o.txt"
)


def _workflow(tmp_path: Path, *, items: str, cmd: str, batch: str = "4", name: str = "wf.yaml") -> str:
    return write(tmp_path, WF.format(items=items, cmd=cmd, batch=batch), name)


def _attempts(hf: Hetflow, run_id: str) -> dict[str, list[Any]]:
    store = Store(hf.home / "state.db")
    return {s.step: store.attempts(run_id, s.step) for s in store.steps(run_id)}


def test_items_keep_their_own_exit_logs_outputs_and_a_failed_one_runs_again_alone(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", "-q", _workflow(tmp_path, items="{range: 8}", cmd=FLAKY), timeout=180)
    run_id = hf.last_run()
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    attempts = _attempts(hf, run_id)
    batches = {a.container for name, rows in attempts.items() if name.startswith("work.") for a in rows[:1]}
    assert all(c.endswith("-batch") for c in batches) and 1 < len(batches) < 8  # several items to a container
    # item 3: its first attempt failed with its own exit code, in its batch; the second ran alone
    first, second = attempts["work.3"]
    assert (first.state, first.exit_code, first.container.endswith("-batch")) == ("failed", 3, True)
    assert (second.state, second.container) == ("succeeded", f"hf-{run_id}-work.3-2")
    assert all(len(attempts[f"work.{i}"]) == 1 for i in range(8) if i != 3)  # the others ran once
    # each item's own outputs, and the gather saw all of them
    assert (step_out(hf, run_id, "work.5") / "o.txt").read_text() == "5\n"
    assert (step_out(hf, run_id, "gather") / "all.txt").read_text().split() == [str(i) for i in range(8)]
    # each item's own log, both streams, nothing of its neighbours
    logs = hf("logs", run_id, "work.6").stdout
    assert "out 6" in logs and "err 6" in logs and "out 5" not in logs and "out 7" not in logs
    assert "out 3" in hf("logs", run_id, "work.3").stdout
    assert not [c for c in os.popen("podman ps -a --format '{{.Names}}'").read().split() if run_id in c]


def test_items_run_in_a_batch_are_cached_each_and_hit_one_by_one(hf: Hetflow, tmp_path: Path) -> None:
    cmd = "echo {{ item }} > /out/o.txt"
    hf("run", "-q", _workflow(tmp_path, items="[a, b, c, d, e, f, g, h]", cmd=cmd), timeout=180)
    first = hf.last_run()
    assert {a[0].container.endswith("-batch") for n, a in _attempts(hf, first).items() if n != "gather"} == {True}
    hf("run", "-q", _workflow(tmp_path, items="[a, b, c, d, e, f, g, z]", cmd=cmd, name="wf2.yaml"), timeout=180)
    second = hf.show(hf.last_run())
    reasons = {s["step"]: s["reason"] for s in second["steps"]}
    assert all(reasons[f"work.{i}"].startswith(f"cached: from run {first}") for i in range(7))
    assert not reasons["work.7"].startswith("cached") and second["state"] == "succeeded"


def test_kill_9_during_a_batch_then_resume_loses_no_item_and_runs_none_twice(hf: Hetflow, tmp_path: Path) -> None:
    cmd = "if [ {{ item }} -ge 8 ]; then sleep 2; fi; echo {{ item }} > /out/o.txt"
    run_id = hf("run", "-d", _workflow(tmp_path, items="{range: 12}", cmd=cmd, batch="6")).stdout.strip()
    hf.wait_for(lambda: "succeeded" in hf.step_states(run_id).values(), timeout=120)  # a batch is under way
    pid = hf.show(run_id)["pid"]
    assert hf.step_states(run_id)["work.11"] != "succeeded"  # the last items sleep: killed mid-batch
    os.kill(pid, signal.SIGKILL)
    hf.wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2])
    hf("resume", run_id, "-q", timeout=180)
    data = hf.show(run_id)
    assert data["state"] == "succeeded"
    attempts = _attempts(hf, run_id)
    assert [len(attempts[f"work.{i}"]) for i in range(12)] == [1] * 12  # none launched again
    assert all(attempts[f"work.{i}"][0].container.endswith("-batch") for i in range(12))  # 4 batches of 3
    workdir = Path(data["workdir"])
    ran = [p.name for p in (workdir / "batches").glob("*/rc/*")]
    assert sorted(ran) == sorted(f"work.{i}.1" for i in range(12))  # each item ran once, in its batch
    assert (step_out(hf, run_id, "gather") / "all.txt").read_text().split() == [str(i) for i in range(12)]


def test_stop_during_a_batch_keeps_the_items_it_finished(hf: Hetflow, tmp_path: Path) -> None:
    # 16 items on 4 free slots: 4 batches of 4; only items 0 and 1 end before the stop
    cmd = "if [ {{ item }} -ge 2 ]; then sleep 60; fi; echo {{ item }} > /out/o.txt"
    run_id = hf("run", "-d", _workflow(tmp_path, items="{range: 16}", cmd=cmd, batch="4")).stdout.strip()
    hf.wait_for(lambda: hf.step_states(run_id).get("work.1") == "succeeded", timeout=120)
    hf("stop", run_id, "--grace", "0")
    states = hf.step_states(run_id)
    assert (states["work.0"], states["work.1"]) == ("succeeded", "succeeded")
    assert {states[f"work.{i}"] for i in range(2, 16)} == {"stopped"}
    attempts = _attempts(hf, run_id)
    assert attempts["work.1"][0].container == attempts["work.2"][0].container  # stopped in the same batch
    assert attempts["work.1"][0].container.endswith("-batch")
    assert hf.show(run_id)["state"] == "stopped"
