"""A step that ran out of disk: its partial outputs go, and its failure names the disk.

A container writing more than its work directory's disk holds fails with ENOSPC inside;
left alone, its half-written outputs keep the disk full for every later step (and the
store beside it).  ``out_of_space`` tells such a failure (the disk holding the attempt's
/out has under ``LOW_WATER`` left after it; the step's log saying "No space left on device"
is not enough: the container's own tmpfs /tmp filling says that too), removes the attempt's
partial outputs and says which disk filled and how much to free."""

from __future__ import annotations

import shutil
from pathlib import Path

from hetflow.state import disk_room, free_bytes, megabytes

LOW_WATER = 1 << 20  # bytes: less free than this after a failed step counts as a full disk


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def is_out_of_space(staging: Path) -> bool:
    free = free_bytes(staging)
    return staging.exists() and free is not None and free < LOW_WATER


def remove_partial(staging: Path) -> int:
    """Remove an attempt's outputs; the bytes they held."""
    if not staging.exists():
        return 0
    try:
        written = _size(staging)
    except OSError:
        written = 0
    shutil.rmtree(staging, ignore_errors=True)
    return written


def out_of_space(staging: Path) -> str | None:
    """When the attempt failed for want of disk: remove its partial outputs and say why
    (the disk, what it wrote, what to free); else None and nothing is touched."""
    if not is_out_of_space(staging):
        return None
    return full_disk_reason(staging, remove_partial(staging))


def full_disk_reason(staging: Path, written: int) -> str:
    mount, room = disk_room(staging, "free now")
    then = "then 'hetflow resume' runs the step again"
    if written < LOW_WATER:  # not this step's outputs: something else filled the disk
        return (
            f"out of disk space: the disk at {mount} (holding {staging.parent}) is full ({room}), not by this"
            f" step's outputs; free space there (or point the work directory elsewhere), {then}"
        )
    return (
        f"out of disk space: the disk at {mount} (holding {staging.parent}) filled up; the step had written"
        f" {megabytes(written)} of output (removed; {room}); free more than {megabytes(written)} there (or point the"
        f" work directory elsewhere), {then}"
    )
