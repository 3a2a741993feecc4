"""Is a run's executor still the process that claimed it?

A run row says "running" from the moment an executor claims it until that executor records
the end; a ``kill -9`` leaves the row saying so for good.  The pid alone does not tell: a
killed executor may linger as a zombie, and its pid may be handed to another process.  The
claim therefore records the process's start time too (``/proc/PID/stat`` field 22,
``starttime``, clock ticks since boot: proc(5)), and the executor counts as gone when the pid
is dead, a zombie, or a process that started at another time."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hetflow.state.models import RUN_RUNNING, RunRecord

PROC = Path("/proc")


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (field 3 onwards), or None."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may itself hold spaces or ')'
    return stat.rpartition(")")[2].split()


def process_start(pid: int, proc: Path = PROC) -> int | None:
    """The process's start time (clock ticks after boot), or None when it cannot be read."""
    fields = _stat_fields(pid, proc)
    if fields is None or len(fields) < 20:
        return None
    try:
        return int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)
    except ValueError:
        return None


def pid_alive(pid: int, proc: Path = PROC) -> bool:
    """Whether ``pid`` runs.  A zombie does not: a killed executor whose parent is gone
    stays a zombie where nothing reaps it (PID 1 of a container), yet answers kill(0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid, proc)
    if fields is None:
        return True  # no /proc to ask: trust kill(0)
    return bool(fields) and fields[0] not in ("Z", "X")


def executor_gone(
    run: RunRecord,
    *,
    alive: Callable[[int], bool] = pid_alive,
    start_of: Callable[[int], int | None] = process_start,
) -> bool:
    """Whether ``run`` says it is running but no executor can make it progress: its pid is
    missing or dead, or now names another process (a start time that differs from the one
    recorded when the run was claimed).  A pending run is not gone: its executor may not have
    claimed it yet."""
    if run.state != RUN_RUNNING:
        return False
    if not run.pid or not alive(run.pid):
        return True
    if run.pid_start is None:
        return False  # claimed by a hetflow that did not record start times: trust the pid
    return start_of(run.pid) not in (None, run.pid_start)
