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
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path

SETTLE_TIMEOUT = 120.0  # seconds: podman creating a container under heavy load, with its lock taken
NOT_STARTED = ("", "created", "configured", "initialized")  # engine states of a container not yet started


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
