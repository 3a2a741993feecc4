"""Is a run's executor still the process that claimed it?

A run row says "running" from the moment an executor claims it until that executor records
the end; a ``kill -9`` leaves the row saying so for good.  The pid alone does not tell: a
killed executor may linger as a zombie, and its pid may be handed to another process.  The
claim therefore records the process's start time too (``/proc/PID/stat`` field 22,
``starttime``, clock ticks since boot: proc(5)), and the executor counts as gone when the pid
is dead, a zombie, a process already dying of SIGKILL, or a process that started at another
time."""

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


PF_EXITING = 0x4  # include/linux/sched.h: the process is in do_exit
SIGKILL_BIT = 1 << (9 - 1)  # bit of SIGKILL in /proc/PID/status's SigPnd/ShdPnd masks


def _kill_pending(pid: int, proc: Path) -> bool:
    """Whether SIGKILL is queued for ``pid`` (proc(5): SigPnd, ShdPnd): ``kill -9`` returns
    before its target is gone, and on a loaded machine a large process takes a while to die."""
    try:
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):
            try:
                if int(value.strip(), 16) & SIGKILL_BIT:
                    return True
            except ValueError:
                continue
    return False


def pid_alive(pid: int, proc: Path = PROC) -> bool:
    """Whether ``pid`` runs on.  A zombie does not: a killed executor whose parent is gone
    stays a zombie where nothing reaps it (PID 1 of a container), yet answers kill(0).  Nor
    does a process already dying (PF_EXITING) or with SIGKILL queued: ``kill -9 PID; hetflow
    resume RUN`` must not be refused because the kernel has not finished the kill yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid, proc)
    if fields is None:
        return True  # no /proc to ask: trust kill(0)
    if not fields or fields[0] in ("Z", "X"):
        return False
    try:
        if len(fields) > 6 and int(fields[6]) & PF_EXITING:  # field 9, flags
            return False
    except ValueError:
        pass
    return not _kill_pending(pid, proc)


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
