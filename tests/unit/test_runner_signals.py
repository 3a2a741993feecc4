"""A signal to the executor stops the run itself (issue 22), with exact fake time: what had
finished is recorded finished, what runs is stopped, the run is stopped and resumable."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.stopping import request_stop
from hetflow.state.models import PENDING, RUNNING, STOPPED, SUCCEEDED
from tests.unit.builders import Outcome, world

WORKFLOW = """
quick:
  image: x
  outputs: [m]
long:
  image: x
after:
  image: x
  needs: [long]
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_collects_a_finished_step_then_stops_the_rest(tmp_path: Path, signum: int) -> None:
    # quick exits (0) at t=1005, the very moment the signal comes, before the loop saw it
    w = world(tmp_path, WORKFLOW, outcomes={"quick": [Outcome(0, 5, files={"m": b"x"})], "long": [Outcome(0, 100)]})
    runner = w.runner()
    w.clock.at[1005.0] = lambda: runner._on_signal(signum, None)

    assert runner.execute() == "stopped"

    name = signal.Signals(signum).name
    steps = {s.step: s for s in w.store.steps(w.run.id)}
    assert {k: s.state for k, s in steps.items()} == {"quick": SUCCEEDED, "long": STOPPED, "after": PENDING}
    assert [(a.state, a.exit_code) for a in w.store.attempts(w.run.id, "quick")] == [(SUCCEEDED, 0)]
    assert [o.name for o in w.store.outputs(w.run.id, "quick")] == ["m"]
    assert steps["long"].reason == f"stopped by {name}"
    run = w.store.run(w.run.id)
    assert (run.state, run.pid, run.message) == ("stopped", None, f"stopped by {name}")
    assert container_name(w.run.id, "long", 1) not in w.engine.containers
    assert w.store.leases() == []


def test_a_signal_from_hetflow_stop_leaves_the_run_to_the_stopper(tmp_path: Path) -> None:
    w = world(tmp_path, WORKFLOW, outcomes={"long": [Outcome(0, 100)]})
    runner = w.runner()

    def stop_sends_sigterm() -> None:
        request_stop(RunPaths(Path(w.run.workdir)))
        runner._on_signal(signal.SIGTERM, None)

    w.clock.at[1005.0] = stop_sends_sigterm

    assert runner.execute() == "stopped"

    assert runner.handed_off
    assert w.step("long").state == RUNNING  # untouched: `hetflow stop` records it
    assert container_name(w.run.id, "long", 1) in w.engine.containers
