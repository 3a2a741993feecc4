"""How long a stopped step may take to save its work, and who stops a run.

A stop gives each step's container a grace period: SIGTERM first, SIGKILL once the grace
is over (``podman stop --time N``, podman-stop(1); its default is 10 s, hetflow's too;
Slurm's is the cluster's KillWait, unless a grace is given).
A step's ``stop_grace:`` sets its own (``by_grace``); ``hetflow stop --grace 30s`` sets it
for every step of one stop; ``HETFLOW_STOP_GRACE`` (or ``hetflow run --grace``) for the stop
an executor makes itself when it gets SIGINT or SIGTERM.  Steps with different graces are
stopped at the same time (``cancel_by_grace``), so a 10 s step is not held behind a 60 s one.

``hetflow stop`` asks a live executor to stop its run itself (``executor_stops``): it leaves
a stop request in the run's work directory (``RunPaths.stop_request``: the grace and
``--checkpoint`` it was given) and sends SIGTERM.  The executor, which holds the run's
attempts, settles what ended before or during the stop as its loop would (exit 0 with its
outputs: succeeded) and stops the rest; the stopper waits for it.  Without a live executor
(or one that does not start its stop in time) the stopper stops the containers itself.  A
new executor of the run (resume) clears a request left behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hetflow.errors import UsageError
from hetflow.execute.backends.base import Backend
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.control.recorded import recorded_steps
from hetflow.spec import fanout_parent
from hetflow.state import LAUNCHING, RUN_RUNNING, RUNNING, STOPPED, RunRecord, Store

__all__ = [
    "DEFAULT_GRACE",
    "GRACE_ENV",
    "StopRequest",
    "by_grace",
    "cancel_by_grace",
    "clear_stop_request",
    "executor_stops",
    "grace_from_env",
    "parse_grace",
    "request_stop",
    "step_graces",
    "stop_request",
    "stop_requested",
]

DEFAULT_GRACE = 10  # seconds: podman stop's default (podman-stop(1), --time)
GRACE_ENV = "HETFLOW_STOP_GRACE"
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)?")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_grace(text: str, *, name: str = "--grace") -> int:
    """A duration (``30s``, ``2m``, ``1h``, ``500ms``, ``0``; a bare number is seconds) as
    whole seconds, rounded up (podman's ``--time`` takes whole seconds)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise UsageError(
            f"{name} {text!r} is not a duration: write seconds, or a number with ms, s, m or h (30s, 2m, 0)"
        )
    return math.ceil(float(m.group(1)) * _UNIT[m.group(2) or "s"])


def grace_from_env(env: Mapping[str, str]) -> int | None:
    """The grace of a stop the executor makes on SIGINT or SIGTERM; None (unset): the
    engine's default (``DEFAULT_GRACE`` for podman, KillWait for Slurm)."""
    text = env.get(GRACE_ENV, "").strip()
    return parse_grace(text, name=GRACE_ENV) if text else None


START_WAIT = 30.0  # seconds a live executor has to start stopping its run before the stopper does it
END_WAIT = 300.0  # and then, beyond the longest grace, to end (a checkpoint's dumps: DUMP_TIMEOUT more)
DUMP_WAIT = 1800.0


@dataclass(frozen=True)
class StopRequest:
    """What ``hetflow stop`` asks of the run's executor: the grace every step gets (None:
    each step's ``stop_grace``, else the engine's default) and whether the steps with CRIU
    checkpoints are dumped first (``--checkpoint``)."""

    grace: int | None = None
    checkpoint: bool = False


def request_stop(paths: RunPaths, request: StopRequest = StopRequest()) -> None:
    """Say that the SIGTERM about to reach the run's executor is ``hetflow stop``'s, and how
    to stop.  Best effort: without it, the executor stops the run with its own grace."""
    with contextlib.suppress(OSError):
        paths.stop_request.write_text(json.dumps({"by": "hetflow stop", **request.__dict__}) + "\n")


def stop_requested(paths: RunPaths) -> bool:
    return paths.stop_request.exists()


def stop_request(paths: RunPaths) -> StopRequest | None:
    """The request ``hetflow stop`` left (None: none); one it cannot read (an older hetflow's
    plain text) asks for the defaults."""
    try:
        text = paths.stop_request.read_text()
    except OSError:
        return None
    try:
        data = json.loads(text)
        grace = data.get("grace")
        return StopRequest(int(grace) if grace is not None else None, bool(data.get("checkpoint")))
    except (ValueError, TypeError, AttributeError):
        return StopRequest()


def executor_stops(
    store: Store, run: RunRecord, request: StopRequest, alive: Callable[[int], bool]
) -> list[str] | None:
    """Ask the run's live executor (``run.pid``) to stop the run itself and wait until it has:
    it holds the attempts, so a job that ended before or during the stop is settled with its
    real outcome, which a stopper without them could only record stopped.  Returns the
    containers it stopped; None when the caller must stop the run itself: the executor did not
    start its stop within START_WAIT seconds (a long turn, or an executor that only ends on
    SIGTERM), did not end within its graces and END_WAIT, or ended leaving the run running."""
    assert run.pid is not None
    paths = RunPaths(Path(run.workdir))
    in_flight = [a for a in store.attempts(run.id) if a.state in (LAUNCHING, RUNNING)]
    request_stop(paths, request)
    os.kill(run.pid, signal.SIGTERM)
    longest = request.grace if request.grace is not None else max([DEFAULT_GRACE, *step_graces(run.spec_json).values()])
    start = time.monotonic()
    began: float | None = None
    while alive(run.pid):
        now = time.monotonic()
        if began is None and store.run(run.id).message.startswith("stopping: "):
            began = now
        if began is None and now - start > START_WAIT:
            return None
        if began is not None and now - began > longest + END_WAIT + (DUMP_WAIT if request.checkpoint else 0.0):
            return None
        time.sleep(0.1)
    if store.run(run.id).state == RUN_RUNNING:
        return None  # it ended without stopping the run (an older hetflow's executor leaves it to us)
    stopped = {(a.step, a.attempt) for a in store.attempts(run.id) if a.state == STOPPED}
    return list(dict.fromkeys(a.container for a in in_flight if (a.step, a.attempt) in stopped))


def clear_stop_request(paths: RunPaths) -> None:
    with contextlib.suppress(OSError):
        paths.stop_request.unlink(missing_ok=True)


def step_graces(spec_json: str) -> dict[str, int]:
    """Each step's ``stop_grace`` in whole seconds (rounded up: podman's ``--time``), read
    from the workflow recorded with the run; steps without one are left out."""
    try:
        return {
            name: math.ceil(float(step["stop_grace"]))
            for name, step in recorded_steps(spec_json).items()
            if step.get("stop_grace") is not None
        }
    except (ValueError, TypeError):
        return {}


def by_grace(
    jobs: Iterable[tuple[str, str]], graces: Mapping[str, int], override: int | None = None
) -> dict[int | None, list[str]]:
    """``(step, container)`` pairs -> the containers grouped by the grace each is given: the
    ``override`` for all (``hetflow stop --grace``, the executor's ``--grace``), else its
    step's ``stop_grace`` (a fan-out item's: its parent's), else None (the engine's default).
    A container named twice (a batch's items share one) is stopped once."""
    groups: dict[int | None, list[str]] = {}
    seen: set[str] = set()
    for step, container in jobs:
        if container in seen:
            continue
        seen.add(container)
        grace = override if override is not None else graces.get(step, graces.get(fanout_parent(step) or ""))
        groups.setdefault(grace, []).append(container)
    return groups


def cancel_by_grace(backend: Backend, groups: Mapping[int | None, list[str]]) -> None:
    """Cancel each group with its grace, all at once: a cancel waits out its grace (podman
    stop does), so one after another would hold a short-grace step behind a long one."""
    items = [(grace, names) for grace, names in groups.items() if names]
    if len(items) <= 1:
        for grace, names in items:
            backend.cancel(names, grace)
        return
    errors: list[BaseException] = []

    def one(grace: int | None, names: list[str]) -> None:
        try:
            backend.cancel(names, grace)
        except BaseException as exc:  # raised again on the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=item, name="stop-grace", daemon=True) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
