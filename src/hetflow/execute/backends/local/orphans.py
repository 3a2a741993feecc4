"""Launches a killed executor left in flight, settled before a resumed run looks at its containers.

The local engine starts each container with an attached ``podman run`` in a session of its
own (``exits.ExitWatch.attach``), so a ``kill -9`` of the executor does not end it: a launch
the executor had begun goes on without it, and on a loaded machine podman may take seconds
more to create the container.  A resumed executor that listed the run's containers in that
moment did not see it, launched the attempt again under the same name, and podman refused
("the container name ... is already in use": exit 125, the step failed).  So before it
lists them, the new executor waits for the old one's launches of the attempts in flight to
settle: each ``ENGINE ... run ... --name NAME`` process still alive whose container has not
started yet (absent, or "created") is waited for until it has, or has ended; one that never
does within ``SETTLE_TIMEOUT`` is killed (its container, if any, is then found not started).

A ``podman run`` killed mid-create (with its executor: a cgroup-wide kill, ``systemctl stop``;
alone: the OOM killer) leaves a container that never starts: podman records it created (or
initialized) while its monitor, conmon, and the runtime's ``runc init`` wait for a start no one
will ask for.  Such a container is no step's failure (``unstarted``: the runner runs it again);
its monitor and what runs under it are ended (``reap``), since ``podman rm`` of a container
podman never learnt the monitor of leaves them alive: 26 pairs, 45 minutes later, while
``podman ps -a`` listed nothing (issue 37).  ``monitors`` lists every conmon by its container's
ID and name (``-c``, ``-n``), for ``hetflow doctor`` to find those podman no longer lists.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SETTLE_TIMEOUT = 120.0  # seconds: podman creating a container under heavy load, with its lock taken
UNSTARTED = ("created", "configured", "initialized")  # podman's states of a container made, not started
NOT_STARTED = ("", *UNSTARTED)  # and of one not made yet (no state)


@dataclass(frozen=True)
class Monitor:
    """A container monitor (conmon) alive now: its PID, its container's ID and name, and the
    PIDs of what runs under it (the runtime's ``runc init``, the container's processes)."""

    pid: int
    container_id: str
    name: str
    below: tuple[int, ...] = ()
    log: str = ""  # the container's log file (``-l [DRIVER:]PATH``): hetflow's is in the run's folder


def unstarted(entry: Mapping[str, Any] | None) -> bool:
    """Whether an ``inspect`` entry is a container that was made but never started."""
    state = (entry or {}).get("State") or {}
    return entry is not None and str(state.get("Status", "")).lower() in UNSTARTED


def monitors(proc: Path = Path("/proc")) -> list[Monitor]:
    """Every conmon running now, by the ``-c ID`` and ``-n NAME`` it was started with."""
    table = processes(proc)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = []
    for pid, (_, argv) in table.items():
        if argv and os.path.basename(argv[0]) == "conmon":
            cid, name, log = _flag(argv, "-c"), _flag(argv, "-n"), _flag(argv, "-l") or _flag(argv, "--log-path")
            if cid and name:
                found.append(Monitor(pid, cid, name, _below(pid, children), log.split(":", 1)[-1]))
    return found


def reap(monitor: Monitor) -> None:
    """SIGKILL the monitor, then what ran under it (the monitor first: it runs no exit command)."""
    for pid in (monitor.pid, *monitor.below):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def reap_unstarted(entry: Mapping[str, Any] | None, proc: Path = Path("/proc")) -> bool:
    """Whether the container of an ``inspect`` entry was made but never started; if so its
    monitor and what runs under it are ended: they would wait for ever, and ``podman rm``
    leaves them where podman never learnt their PIDs."""
    if not unstarted(entry):
        return False
    assert entry is not None
    for m in monitors(proc):
        if m.container_id == str(entry.get("Id", "")):
            reap(m)
    return True


def reap_unlisted(prefix: str, listed: Collection[str], proc: Path = Path("/proc")) -> list[Monitor]:
    """End the monitors of containers named ``PREFIX...`` (a run's: ``hf-RUN-``) that the
    engine no longer lists (``listed``), and what runs under them; those ended."""
    found = [m for m in monitors(proc) if m.name.startswith(prefix) and m.name not in listed]
    for m in found:
        reap(m)
    return found


def processes(proc: Path = Path("/proc")) -> dict[int, tuple[int, list[str]]]:
    """PID -> (parent PID, command line) of every process it can read (``proc``: procfs)."""
    table: dict[int, tuple[int, list[str]]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        table[int(entry.name)] = (ppid, argv)
    return table


def _flag(argv: list[str], flag: str) -> str:
    return next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag), "")


def _below(pid: int, children: Mapping[int, list[int]]) -> tuple[int, ...]:
    """The PIDs under ``pid``, parents before their children."""
    out: list[int] = []
    todo = [pid]
    while todo:
        kids = children.get(todo.pop(0), [])
        out += kids
        todo += kids
    return tuple(out)


def launchers(binary: str, names: Collection[str], proc: Path = Path("/proc")) -> dict[int, str]:
    """PID -> container name of every ``BINARY ... run ... --name NAME`` process for ``names``
    (the engine's own client, matched by its program's file name)."""
    base, wanted, found = os.path.basename(binary), set(names), {}
    if not wanted:
        return {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if not argv or os.path.basename(argv[0]) != base or "run" not in argv:
            continue
        for i, arg in enumerate(argv):
            if arg == "--name" and i + 1 < len(argv):
                name = argv[i + 1]
            elif arg.startswith("--name="):
                name = arg.removeprefix("--name=")
            else:
                continue
            if name in wanted:
                found[int(entry.name)] = name
    return found


def settle(
    binary: str,
    names: Collection[str],
    status: Callable[[Collection[str]], dict[str, str]],
    *,
    timeout: float = SETTLE_TIMEOUT,
    pause: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    find: Callable[[str, Collection[str]], dict[int, str]] = launchers,
) -> list[str]:
    """Wait until no launch of ``names`` is in flight: every launcher found has started its
    container (``status``: name -> the engine's state word, absent when it has none) or has
    ended.  Returns the containers whose launchers were killed after ``timeout``."""
    deadline = clock() + timeout
    while True:
        found = find(binary, names)
        states = status(sorted(set(found.values()))) if found else {}
        pending = {pid: n for pid, n in found.items() if states.get(n, "") in NOT_STARTED}
        if not pending:
            return []
        if clock() >= deadline:
            for pid in pending:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)  # its own session (start_new_session): it leads its group
            return sorted(set(pending.values()))
        pause(0.1)
