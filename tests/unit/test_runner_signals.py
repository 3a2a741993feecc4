"""A signal to the executor stops the run itself (issue 22), with exact fake time: what had
finished is recorded finished, what runs is stopped, the run is stopped and resumable."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from pathlib import Path

import pytest

from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.run.control.stopping import StopRequest, request_stop, stop_request
from hetflow.state.models import PENDING, STOPPED, SUCCEEDED
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


def test_hetflow_stops_sigterm_makes_the_executor_stop_its_run_with_the_asked_grace(tmp_path: Path) -> None:
    """issue 37: the executor, which holds the attempts, stops the run `hetflow stop` asked it
    to stop: quick, ended as the SIGTERM came (not yet seen by the loop), is settled succeeded;
    long is stopped with the request's grace."""
    w = world(tmp_path, WORKFLOW, outcomes={"quick": [Outcome(0, 5, files={"m": b"x"})], "long": [Outcome(0, 100)]})
    runner = w.runner()
    graces: list[int] = []
    stop = w.engine.stop

    def stop_noting_its_grace(names: Iterable[str], timeout: int = 10) -> None:
        graces.append(timeout)
        stop(names, timeout)

    w.engine.stop = stop_noting_its_grace  # type: ignore[method-assign]

    def stop_sends_sigterm() -> None:
        request_stop(RunPaths(Path(w.run.workdir)), StopRequest(grace=7))
        runner._on_signal(signal.SIGTERM, None)

    w.clock.at[1005.0] = stop_sends_sigterm

    assert runner.execute() == "stopped"

    assert runner.handed_off
    assert {s.step: s.state for s in w.store.steps(w.run.id)} == {"quick": SUCCEEDED, "long": STOPPED, "after": PENDING}
    assert [o.name for o in w.store.outputs(w.run.id, "quick")] == ["m"]
    assert w.step("long").reason == "stopped by hetflow stop" and graces == [7]
    run = w.store.run(w.run.id)
    assert (run.state, run.pid, run.message) == ("stopped", None, "stopped by hetflow stop")


def test_a_step_that_exits_0_in_its_stop_grace_is_settled_succeeded(tmp_path: Path) -> None:
    """issue 37: a job that ends by its own exit 0, with its outputs, while the stop waits out
    its grace (a SIGTERM handler that saved and finished) is succeeded, not stopped."""
    w = world(tmp_path, WORKFLOW, outcomes={"quick": [Outcome(0, 100, files={"m": b"x"})], "long": [Outcome(0, 100)]})
    runner = w.runner()
    stop = w.engine.stop

    def quick_finishes_in_its_grace(names: Iterable[str], timeout: int = 10) -> None:
        names = list(names)
        for name in names:
            if "-quick-" in name:  # exits 0 on SIGTERM: it ran until now, not stopped
                w.engine.containers[name].duration = w.clock() - w.engine.containers[name].started
        stop([n for n in names if "-quick-" not in n], timeout)

    w.engine.stop = quick_finishes_in_its_grace  # type: ignore[method-assign]
    w.clock.at[1005.0] = lambda: runner._on_signal(signal.SIGTERM, None)

    assert runner.execute() == "stopped"

    assert {s.step: s.state for s in w.store.steps(w.run.id)} == {"quick": SUCCEEDED, "long": STOPPED, "after": PENDING}
    assert [(a.state, a.exit_code) for a in w.store.attempts(w.run.id, "quick")] == [(SUCCEEDED, 0)]
    assert [(a.state, a.exit_code) for a in w.store.attempts(w.run.id, "long")] == [(STOPPED, 137)]


@pytest.mark.parametrize(
    ("text", "asked"),
    [
        ('{"by": "hetflow stop", "grace": 30, "checkpoint": true}', StopRequest(30, True)),
        ('{"by": "hetflow stop", "grace": null, "checkpoint": false}', StopRequest()),
        ("hetflow stop\n", StopRequest()),  # an older hetflow's request: the defaults
    ],
    ids=["grace-and-checkpoint", "defaults", "older-text"],
)
def test_a_stop_request_is_read_back(tmp_path: Path, text: str, asked: StopRequest) -> None:
    paths = RunPaths(tmp_path)
    assert stop_request(paths) is None
    paths.stop_request.parent.mkdir(parents=True, exist_ok=True)
    paths.stop_request.write_text(text)
    assert stop_request(paths) == asked


def test_a_step_that_exits_0_in_its_stop_grace_without_its_outputs_is_stopped(tmp_path: Path) -> None:
    """issue 37: an exit 0 in the grace that left a declared output out quit as asked: it is
    stopped (its exit code beside it) and resume runs it again, not failed as if it had ended so."""
    w = world(tmp_path, WORKFLOW, outcomes={"quick": [Outcome(0, 100)], "long": [Outcome(0, 100)]})
    runner = w.runner()
    stop = w.engine.stop

    def quick_quits_in_its_grace(names: Iterable[str], timeout: int = 10) -> None:
        names = list(names)
        for name in names:
            if "-quick-" in name:  # exits 0 on SIGTERM, m unwritten
                w.engine.containers[name].duration = w.clock() - w.engine.containers[name].started
        stop([n for n in names if "-quick-" not in n], timeout)

    w.engine.stop = quick_quits_in_its_grace  # type: ignore[method-assign]
    w.clock.at[1005.0] = lambda: runner._on_signal(signal.SIGTERM, None)

    assert runner.execute() == "stopped"

    assert {s.step: s.state for s in w.store.steps(w.run.id)} == {"quick": STOPPED, "long": STOPPED, "after": PENDING}
    assert [(a.state, a.exit_code) for a in w.store.attempts(w.run.id, "quick")] == [(STOPPED, 0)]
