"""Reading container logs written by podman's k8s-file driver.

Each line is ``<RFC3339 time> <stdout|stderr> <F|P> <text>``; P marks a partial line
that continues on the next record (CRI logging format)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hetflow.execute.secrets import active, mask


def parse_line(raw: str) -> tuple[str, str, bool, str] | None:
    parts = raw.rstrip("\n").split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr"):
        return None
    text = parts[3] if len(parts) == 4 else ""
    return parts[0], parts[1], parts[2] == "P", text


@dataclass(frozen=True)
class Records:
    """The records of a window of a log that starts at a record, as lines.

    ``lines``: the complete lines (stream, text), each P group joined with its closing F
    record; ``end``: the bytes up to the last newline (a record with no newline yet is not
    read); ``pending``: the text of a P group that no F record has closed yet ("" when none),
    its ``pending_stream``, and ``group_start``, the byte where that group begins: a reader
    goes on from there next time, so the group is read again whole."""

    lines: list[tuple[str, str]]
    end: int
    pending: str
    pending_stream: str
    group_start: int


def group_records(data: bytes) -> Records:
    """``data`` as lines: the one grouping of P/F records that ``read_lines`` and the
    dashboard's log feed (``ui.streams``) share."""
    end = data.rfind(b"\n") + 1
    out: list[tuple[str, str]] = []
    pending, pending_stream = "", "stdout"
    pos = 0  # byte position in data of the next record
    group_start = 0  # where the pending partial group began; resume from here next time
    for raw in data[:end].splitlines(keepends=True):
        parsed = parse_line(raw.decode("utf-8", "replace"))
        if not pending:
            group_start = pos
        pos += len(raw)
        if parsed is None:
            continue
        _, stream, partial, text = parsed
        if partial:
            pending, pending_stream = pending + text, stream
            continue
        out.append((stream, pending + text))
        pending = ""
    return Records(out, end, pending, pending_stream, group_start)


def read_lines(path: Path, offset: int = 0) -> tuple[list[tuple[str, str]], int]:
    """Complete lines (stream, text) from byte ``offset``; returns the new offset."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    got = group_records(data)
    # every reader of a step's output in this process shows a secret it knows as *** (``secrets``)
    lines = [(stream, mask(text)) for stream, text in got.lines] if active().values else got.lines
    # A group of P records not yet closed by its F record is read again next time.
    return lines, offset + (got.group_start if got.pending else got.end)


def iter_log(path: Path) -> Iterator[tuple[str, str]]:
    lines, _ = read_lines(path)
    yield from lines


def log_tail(path: Path, n: int) -> list[str]:
    lines, _ = read_lines(path)
    return [text for _, text in lines[-n:] if text.strip()]
