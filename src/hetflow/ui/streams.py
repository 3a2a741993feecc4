"""The dashboard's live feeds as server-sent events: a run's typed event stream
(``state.follow``, as ``hetflow logs -f`` and the progress display read it) and a step's log
while its attempt runs.  Each poll of the store or the log file runs in a worker thread."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio

from hetflow.execute import RunPaths, read_lines
from hetflow.state import (
    RUN_TERMINAL,
    AttemptFinished,
    AttemptStarted,
    RunEvent,
    RunStateChanged,
    StepStateChanged,
    Store,
    follow,
)

POLL = 0.5  # seconds between reads of the store
PING = 10.0  # seconds between keep-alive comments (proxies close silent streams)
ATTEMPT_OVER = ("succeeded", "failed", "stopped")

_NAMES = {StepStateChanged: "step", RunStateChanged: "run", AttemptStarted: "attempt", AttemptFinished: "attempt"}


def event_json(e: RunEvent) -> dict[str, Any]:
    return {"type": type(e).__name__, **dataclasses.asdict(e)}


def sse(event: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def run_events(open_store: Callable[[], Store], run_id: str, after: int) -> AsyncIterator[str]:
    """Every event of the run after ``after``, as it is stored; ``end`` once the run is over
    and all of it was sent (a resumed run starts a new stream from the page)."""
    last_sent = time.monotonic()
    cursor = after

    def poll(since: int) -> tuple[list[RunEvent], str]:
        store = open_store()
        return list(follow(store, run_id, since)), store.run(run_id).state

    yield "retry: 2000\n\n"
    while True:
        events, state = await anyio.to_thread.run_sync(poll, cursor)
        for e in events:
            cursor = e.id
            yield sse(_NAMES.get(type(e), "note"), event_json(e), e.id)
            last_sent = time.monotonic()
        if not events and state in RUN_TERMINAL:
            yield sse("end", {"state": state})
            return
        if time.monotonic() - last_sent > PING:
            yield ": ping\n\n"
            last_sent = time.monotonic()
        await anyio.sleep(POLL)


def log_path(store: Store, run_id: str, step: str, attempt: int | None, rank: int) -> tuple[Path, int, str]:
    """The log file of a step's attempt (the last one by default) and replica, the
    attempt's number and its state; a step that never started has none (LookupError)."""
    attempts = store.attempts(run_id, step)
    if not attempts:
        raise LookupError(f"step {step!r} of run {run_id} has not started; it has no log yet")
    chosen = attempts[-1] if attempt is None else next((a for a in attempts if a.attempt == attempt), None)
    if chosen is None:
        raise LookupError(
            f"step {step!r} has no attempt {attempt}; it has {', '.join(str(a.attempt) for a in attempts)}"
        )
    paths = RunPaths(Path(store.run(run_id).workdir))
    return paths.rank_log(step, chosen.attempt, rank), chosen.attempt, chosen.state


TAIL = 500


def log_tail(path: Path, offset: int | None) -> tuple[list[dict[str, str]], int]:
    """The lines after ``offset`` (None: the last ``TAIL`` lines) and the offset after them."""
    if not path.exists():
        return [], offset or 0
    lines, end = read_lines(path, offset or 0)
    if offset is None:
        lines = lines[-TAIL:]
    return [{"stream": s, "text": t} for s, t in lines], end


async def log_events(
    open_store: Callable[[], Store], run_id: str, step: str, attempt: int | None, rank: int, offset: int | None = None
) -> AsyncIterator[str]:
    """The lines after byte ``offset`` (None: the log's last lines first), then each new line
    while the attempt runs; ``end`` after it.  Each batch's last line carries the offset after
    it as its event id, so a reconnecting EventSource (Last-Event-ID) resumes without repeats."""
    path, number, _ = await anyio.to_thread.run_sync(lambda: log_path(open_store(), run_id, step, attempt, rank))
    last_sent = time.monotonic()

    def state_now() -> str:
        return next(a.state for a in open_store().attempts(run_id, step) if a.attempt == number)

    while True:
        state = await anyio.to_thread.run_sync(state_now)
        lines, offset = await anyio.to_thread.run_sync(log_tail, path, offset)
        for i, line in enumerate(lines):
            yield sse("line", line, offset if i == len(lines) - 1 else None)
            last_sent = time.monotonic()
        if state in ATTEMPT_OVER and not lines:
            yield sse("end", {"attempt": number, "state": state})
            return
        if time.monotonic() - last_sent > PING:
            yield ": ping\n\n"
            last_sent = time.monotonic()
        await anyio.sleep(POLL)
