"""A run's event stream, typed: what the CLI, the reports and a dashboard read.

Every row of the store's ``events`` table becomes one frozen value.  Step state changes are
written with the state change itself (``Store.set_step(event=...)``, one transaction), so
their kind is the new state; everything else the runner says goes through ``record``:

    RunStateChanged    pending (created), running (an executor took it), succeeded, failed, stopped
    StepStateChanged   a step's new state (waiting, launching, running, succeeded, ...)
    AttemptStarted     an attempt was handed to the engine
    AttemptFinished    an attempt ended: succeeded, failed or stopped, with its exit code
    Note               anything else worth a line (an output found damaged, an exit collected)

``follow`` reads what is new after an event id; ``tail`` keeps reading until the run ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hetflow.state.models import (
    RUN_PENDING,
    RUN_RUNNING,
    RUN_TERMINAL,
    STEP_TRANSITIONS,
    Event,
)
from hetflow.state.store import Store

# Kinds of the rows ``record`` writes (state changes use the state's own name).
EXECUTOR, CREATED = "executor", "created"
ATTEMPT_STARTED, ATTEMPT_FINISHED = "attempt-started", "attempt-finished"


@dataclass(frozen=True)
class RunEvent:
    """What every event has: its id in the stream (0 before it is stored), run, time, text."""

    id: int
    run_id: str
    time: float
    message: str


@dataclass(frozen=True)
class RunStateChanged(RunEvent):
    state: str


@dataclass(frozen=True)
class StepStateChanged(RunEvent):
    step: str
    state: str


@dataclass(frozen=True)
class AttemptStarted(RunEvent):
    step: str
    attempt: int
    container: str


@dataclass(frozen=True)
class AttemptFinished(RunEvent):
    step: str
    attempt: int
    state: str  # succeeded, failed or stopped
    exit_code: int | None


@dataclass(frozen=True)
class Note(RunEvent):
    step: str | None
    kind: str


def record(store: Store, event: RunEvent) -> None:
    """Append ``event`` to its run's stream (its id and time are the store's)."""
    step: str | None = None
    data: dict[str, Any] = {}
    if isinstance(event, RunStateChanged):
        kind = EXECUTOR if event.state == RUN_RUNNING else CREATED if event.state == RUN_PENDING else event.state
    elif isinstance(event, StepStateChanged):
        step, kind = event.step, event.state
    elif isinstance(event, AttemptStarted):
        step, kind, data = event.step, ATTEMPT_STARTED, {"attempt": event.attempt, "container": event.container}
    elif isinstance(event, AttemptFinished):
        step, kind = event.step, ATTEMPT_FINISHED
        data = {"attempt": event.attempt, "state": event.state, "exit_code": event.exit_code}
    elif isinstance(event, Note):
        step, kind = event.step, event.kind
    else:
        raise TypeError(f"not a run event: {event!r}")
    store.add_event(event.run_id, step, kind, event.message, json.dumps(data) if data else "{}")


def typed(row: Event) -> RunEvent:
    """The typed value of a stored row."""
    base = (row.id, row.run_id, row.time, row.message)
    data = json.loads(row.data or "{}")
    if row.step is None:
        if row.kind == CREATED:
            return RunStateChanged(*base, RUN_PENDING)
        if row.kind == EXECUTOR:
            return RunStateChanged(*base, RUN_RUNNING)
        if row.kind in RUN_TERMINAL:
            return RunStateChanged(*base, row.kind)
        return Note(*base, None, row.kind)
    if row.kind == ATTEMPT_STARTED:
        return AttemptStarted(*base, row.step, int(data["attempt"]), str(data["container"]))
    if row.kind == ATTEMPT_FINISHED:
        return AttemptFinished(*base, row.step, int(data["attempt"]), str(data["state"]), data.get("exit_code"))
    if row.kind in STEP_TRANSITIONS:
        return StepStateChanged(*base, row.step, row.kind)
    return Note(*base, row.step, row.kind)


def follow(store: Store, run_id: str, after: int = 0) -> Iterator[RunEvent]:
    """The run's events stored after event id ``after``, oldest first."""
    for row in store.events(run_id, after):
        yield typed(row)


class RunWatch:
    """A reader's place in one run's stream, and the run state it has seen so far."""

    def __init__(self, store: Store, run_id: str, after: int = 0) -> None:
        self.store, self.run_id, self.cursor = store, run_id, after
        self.state: str | None = None

    def poll(self) -> list[RunEvent]:
        """The events since the last poll."""
        new = list(follow(self.store, self.run_id, self.cursor))
        for e in new:
            self.cursor = e.id
            if isinstance(e, RunStateChanged):
                self.state = e.state
        return new

    @property
    def ended(self) -> bool:
        """Whether the last run state read is an end (a resumed run starts again)."""
        return self.state in RUN_TERMINAL


def tail(
    store: Store,
    run_id: str,
    after: int = 0,
    *,
    interval: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[RunEvent]:
    """Every event after ``after``, waiting for new ones, until the run ends."""
    watch = RunWatch(store, run_id, after)
    while True:
        yield from watch.poll()
        if watch.ended:
            return
        sleep(interval)
