"""The run-event stream: what the runner writes comes back as typed values, in order, and a
reader that tails the stream stops when the run ends (and not before)."""

from __future__ import annotations

from pathlib import Path

from hetflow.execute import make_backend, stop_run
from hetflow.state import (
    AttemptFinished,
    AttemptStarted,
    Note,
    RunStateChanged,
    RunWatch,
    StepStateChanged,
    follow,
    record,
    tail,
)
from tests.unit.builders import Outcome, world

CHAIN = """
a:
  image: x
  retries: 1
b:
  needs: [a]
  image: x
"""


def test_a_run_reads_back_as_typed_events_in_order(tmp_path: Path) -> None:
    w = world(tmp_path, CHAIN, outcomes={"a": [Outcome(exit_code=3), Outcome()]})
    assert w.execute() == "succeeded"
    rid = w.run.id
    events = list(follow(w.store, rid))

    assert [e.state for e in events if isinstance(e, RunStateChanged)] == ["pending", "running", "succeeded"]
    assert [(e.step, e.attempt) for e in events if isinstance(e, AttemptStarted)] == [("a", 1), ("a", 2), ("b", 1)]
    finished = [(e.step, e.attempt, e.state, e.exit_code) for e in events if isinstance(e, AttemptFinished)]
    assert finished == [("a", 1, "failed", 3), ("a", 2, "succeeded", 0), ("b", 1, "succeeded", 0)]
    a_states = [e.state for e in events if isinstance(e, StepStateChanged) and e.step == "a"]
    assert a_states == ["launching", "waiting", "launching", "succeeded"]
    assert [e.id for e in events] == sorted(e.id for e in events)
    started = next(e for e in events if isinstance(e, AttemptStarted))
    assert started.container == f"hf-{rid}-a-1" and started.time >= 0
    # after an id: only what is newer
    assert list(follow(w.store, rid, events[-2].id)) == events[-1:]


def test_stop_ends_the_stream_with_the_stopped_state(tmp_path: Path) -> None:
    w = world(tmp_path, CHAIN, outcomes={"a": [Outcome(duration=50)]})
    w.clock.at[1010.0] = lambda: stop_run(w.store, make_backend(engine=w.engine), w.run.id, alive=lambda p: False)
    assert w.execute() == "stopped"
    events = list(follow(w.store, w.run.id))
    assert isinstance(events[-1], RunStateChanged) and events[-1].state == "stopped"
    assert [(e.step, e.state) for e in events if isinstance(e, AttemptFinished)] == [("a", "stopped")]


def test_tail_waits_for_the_run_to_end_then_stops(tmp_path: Path) -> None:
    w = world(tmp_path, CHAIN)
    rid = w.run.id
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        # the executor runs while the reader naps
        naps.append(seconds)
        if len(naps) == 1:
            w.execute()

    seen = list(tail(w.store, rid, interval=0.5, sleep=sleep))
    assert naps == [0.5]  # one nap before the run ran; none after it ended
    assert isinstance(seen[0], RunStateChanged) and seen[0].state == "pending"
    assert isinstance(seen[-1], RunStateChanged) and seen[-1].state == "succeeded"


def test_watch_follows_a_resumed_run_back_to_running(tmp_path: Path) -> None:
    w = world(tmp_path, CHAIN)
    watch = RunWatch(w.store, w.run.id)
    watch.poll()
    assert (watch.state, watch.ended) == ("pending", False)
    record(w.store, RunStateChanged(0, w.run.id, 0.0, "stopped; 0 container(s) stopped", "stopped"))
    watch.poll()
    assert watch.ended
    record(w.store, RunStateChanged(0, w.run.id, 0.0, "executor 1 on n", "running"))
    record(w.store, Note(0, w.run.id, 0.0, "outputs damaged", "a", "damaged"))
    new = watch.poll()
    assert (watch.ended, [type(e).__name__ for e in new]) == (False, ["RunStateChanged", "Note"])
    assert [(e.kind, e.message) for e in w.store.events(w.run.id)][-2] == ("executor", "executor 1 on n")
