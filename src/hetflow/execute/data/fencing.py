"""Only the accepted attempt writes (issue 37): every attempt of a step carries a fencing token,
its attempt number, and only the attempt the token names may put outputs in the step's folder.

The executor writes the token before it hands attempt N to the engine (``grant``) and takes it
back the moment it gives up on an attempt (``revoke``: lost with its node, failed, requeued), so
an attempt that outlives hetflow's interest in it (a node that lost only its slurmd or its
network: the job and its container live on) can never replace what a later attempt wrote.  The
check and the rename are one act: both sides hold the step's lock (flock(2) on a file of the
shared work directory; a Slurm job script takes it with flock(1), ``backends.slurm.publish``)
from reading the token to the end of the rename.  A refused attempt's outputs stay in its own
folder, which it marks ``discarded`` (who held the token instead), and the executor records it
so (``execute.lostattempts``).  Beside the step's outputs, in the shared work directory::

    steps/STEP/fence        the token: the one attempt that may write steps/STEP/out ("0": none)
    steps/STEP/fence.lock   the lock every writer holds around the check and the rename
    attempts/STEP/N/discarded   left by attempt N when its rename was refused

A step no attempt was granted yet (a run begun before fencing) has no token: the rename goes on.
Locks on a network file system: an NFS client emulates flock(2) with a byte-range lock over the
whole file, which the server holds for every client (flock(2), NOTES; nfs(5) ``local_lock=none``,
the default), so a node's job script and the executor exclude each other; such an exclusive lock
needs the file open for writing, hence the lock file is opened for appending on both sides.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

FENCE = "fence"
LOCK = "fence.lock"
DISCARDED = "discarded"
NOBODY = 0  # the token of a step whose last attempt was given up and whose next is not granted yet
DISCARDED_WORDS = "its outputs were discarded (fencing)"  # how a discarded attempt's message ends


class Fenced(Exception):
    """An attempt's rename was refused: the token names another attempt (``holder``)."""

    def __init__(self, attempt: int, holder: int) -> None:
        super().__init__(discarded_text(attempt, holder))
        self.attempt, self.holder = attempt, holder


def fence_file(final: Path) -> Path:
    """The token of the step whose outputs go to ``final`` (``steps/STEP/out``)."""
    return final.parent / FENCE


def lock_file(final: Path) -> Path:
    return final.parent / LOCK


def discarded_file(staging: Path) -> Path:
    """Where attempt N (its /out: ``attempts/STEP/N/out``) says its outputs were discarded."""
    return staging.parent / DISCARDED


def discarded_text(attempt: int, holder: int) -> str:
    """Why an attempt's outputs were not put in place, in the words every backend uses."""
    who = f"attempt {holder} holds the step" if holder != NOBODY else "hetflow had given the attempt up"
    return f"attempt {attempt} ended after {who}: {DISCARDED_WORDS}"


@contextlib.contextmanager
def locked(final: Path) -> Iterator[None]:
    """Hold the step's lock (exclusive, blocking) for the ``with`` block."""
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file(final), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def holder(final: Path) -> int | None:
    """The attempt the token names; None when no attempt was granted (or the file is unreadable)."""
    try:
        text = fence_file(final).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _write(final: Path, attempt: int) -> None:
    token = fence_file(final)
    part = token.with_name(f".{FENCE}.{os.getpid()}")
    part.write_text(f"{attempt}\n")
    os.replace(part, token)  # a reader without the lock sees the old token or the new one


def grant(final: Path, attempt: int) -> None:
    """Attempt ``attempt`` (and no other) may write ``final`` from now on: before it is submitted."""
    with locked(final):
        _write(final, attempt)


def revoke(final: Path, attempt: int) -> None:
    """Take the token back from ``attempt`` (hetflow gave it up); a later grant stays."""
    with locked(final):
        if holder(final) == attempt:
            _write(final, NOBODY)


def check(final: Path, staging: Path, attempt: int) -> None:
    """Under ``locked(final)``: raise Fenced when the token names another attempt, after marking
    the attempt's folder (``discarded_file``)."""
    held = holder(final)
    if held is None or held == attempt:
        return
    with contextlib.suppress(OSError):  # the mark is for the record; the refusal stands without it
        discarded_file(staging).write_text(discarded_text(attempt, held) + "\n")
    raise Fenced(attempt, held)
