"""The dashboard's live feeds as server-sent events: a run's typed event stream
(``state.follow``, as ``hetflow logs -f`` and the progress display read it) and a step's log
while its attempt runs.  Each poll of the store or the log file runs in a worker thread."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio

from hetflow.execute import RunPaths, group_records, parse_line
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


TAIL = 500  # lines of a log's tail
MAX_LOG_BYTES = 1 << 20  # bytes of log read for one answer or one stream poll (and the tail's window)
CUT_MARK = " [... cut: the line is longer than {} bytes]"


def _lines_in(data: bytes, full: bool, cap: int) -> tuple[list[dict[str, Any]], int]:
    """The lines (stream, text) of ``data``, a window of a log that starts at a line, and how
    many of its bytes they use.  A group of partial (P) records not yet closed is sent as the
    line so far (``partial``) and read again next time, as its bytes are not counted used,
    unless it fills the window (``full``): then it is sent cut, as is a single record with no
    newline that fills it, so a reader always moves on."""
    end = data.rfind(b"\n") + 1
    if end == 0 and full:  # one record longer than the window: its start, cut
        parsed = parse_line(data.decode("utf-8", "replace"))
        stream, text = (parsed[1], parsed[3]) if parsed else ("stdout", data.decode("utf-8", "replace"))
        return [{"stream": stream, "text": text + CUT_MARK.format(cap), "cut": True}], len(data)
    got = group_records(data)
    out: list[dict[str, Any]] = [{"stream": stream, "text": text} for stream, text in got.lines]
    if not got.pending:
        return out, end
    if got.group_start == 0 and full:  # a P group longer than the window: sent cut
        out.append({"stream": got.pending_stream, "text": got.pending + CUT_MARK.format(cap), "cut": True})
        return out, end
    # The line so far, marked partial, and read again from its start next time (issue 38: output
    # with no newline yet, a progress bar or one long line, showed nothing until it ended).
    out.append({"stream": got.pending_stream, "text": got.pending, "partial": True})
    return out, got.group_start


def log_tail(path: Path, offset: int | None, cap: int = MAX_LOG_BYTES) -> tuple[list[dict[str, Any]], int]:
    """The lines after byte ``offset`` (None: the last ``TAIL`` lines within the log's last
    ``cap`` bytes) and the offset to go on from.  At most ``cap`` bytes are read (a seek, never
    the whole file); a line longer than that comes cut and marked, and a read that starts inside
    a line (after a cut one) skips to the line's end."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return [], offset or 0
    with f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - cap) if offset is None else min(offset, size)
        inside = False
        if start > 0:
            f.seek(start - 1)
            inside = f.read(1) != b"\n"
        data = f.read(min(cap, size - start))
    full = len(data) == cap
    if inside:  # the rest of a line already sent cut (or the tail window's first, partial line)
        newline = data.find(b"\n")
        if newline < 0:
            return [], start + (len(data) if full else 0)
        start, data, full = start + newline + 1, data[newline + 1 :], False
    lines, used = _lines_in(data, full, cap)
    if offset is None:
        lines = lines[-TAIL:]
    return lines, start + used


async def log_events(
    open_store: Callable[[], Store], run_id: str, step: str, attempt: int | None, rank: int, offset: int | None = None
) -> AsyncIterator[str]:
    """The lines after byte ``offset`` (None: the log's last lines first), then each new line
    while the attempt runs; ``end`` after it.  Each batch's last line carries the offset after
    it as its event id, so a reconnecting EventSource (Last-Event-ID) resumes without repeats;
    a line not finished yet (``partial``) is sent again as it grows, until it is finished: the
    page replaces it each time."""
    path, number, _ = await anyio.to_thread.run_sync(lambda: log_path(open_store(), run_id, step, attempt, rank))
    last_sent = time.monotonic()

    def state_now() -> str:
        return next(a.state for a in open_store().attempts(run_id, step) if a.attempt == number)

    seen = -1  # the log's size at the last read: a log that did not grow is not read again

    def size() -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    while True:
        state = await anyio.to_thread.run_sync(state_now)
        now = await anyio.to_thread.run_sync(size)
        lines: list[dict[str, Any]] = []
        if now != seen or offset is None:
            seen, before = now, offset
            lines, after = await anyio.to_thread.run_sync(log_tail, path, offset)
            offset = after
            if after != before and after < now:
                seen = -1  # more was there than one read takes: read on at the next poll
        for i, line in enumerate(lines):
            yield sse("line", line, offset if i == len(lines) - 1 else None)
            last_sent = time.monotonic()
        if state in ATTEMPT_OVER and not lines and seen == now:
            yield sse("end", {"attempt": number, "state": state})
            return
        if time.monotonic() - last_sent > PING:
            yield ": ping\n\n"
            last_sent = time.monotonic()
        await anyio.sleep(POLL)
