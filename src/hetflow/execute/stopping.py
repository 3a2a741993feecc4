"""How long a stopped step may take to save its work, and who stops a run.

A stop gives each step's container a grace period: SIGTERM first, SIGKILL once the grace
is over (``podman stop --time N``, podman-stop(1); its default is 10 s, hetflow's too;
Slurm's is the cluster's KillWait, unless a grace is given).
A step's ``stop_grace:`` sets its own (``by_grace``); ``hetflow stop --grace 30s`` sets it
for every step of one stop; ``HETFLOW_STOP_GRACE`` (or ``hetflow run --grace``) for the stop
an executor makes itself when it gets SIGINT or SIGTERM.  Steps with different graces are
stopped at the same time (``cancel_by_grace``), so a 10 s step is not held behind a 60 s one.

``hetflow stop`` ends an executor with SIGTERM and stops the containers itself; so the
executor can tell that SIGTERM from one sent by systemd, Slurm, Kubernetes or ``timeout``
(after which it stops the run itself), the stopper first leaves a stop request in the
run's work directory (``RunPaths.stop_request``).  A new executor of the run (resume)
clears one left behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from hetflow.errors import UsageError
from hetflow.execute.backends.base import Backend
from hetflow.execute.data.paths import RunPaths
from hetflow.spec import fanout_parent

__all__ = [
    "DEFAULT_GRACE",
    "GRACE_ENV",
    "by_grace",
    "cancel_by_grace",
    "clear_stop_request",
    "grace_from_env",
    "parse_grace",
    "request_stop",
    "step_graces",
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


def request_stop(paths: RunPaths) -> None:
    """Say that the SIGTERM about to reach the run's executor is ``hetflow stop``'s.  Best
    effort: without it, the executor stops the run itself, which is a stop too."""
    with contextlib.suppress(OSError):
        paths.stop_request.write_text("hetflow stop\n")


def stop_requested(paths: RunPaths) -> bool:
    return paths.stop_request.exists()


def clear_stop_request(paths: RunPaths) -> None:
    with contextlib.suppress(OSError):
        paths.stop_request.unlink(missing_ok=True)


def recorded_steps(spec_json: str) -> dict[str, dict[str, Any]]:
    """The steps of the workflow recorded with a run, as plain JSON by name ({} where it cannot
    be read): what a stop, a resume and ``hetflow logs`` read back field by field (the whole
    dump does not validate again: a default such as ``gpu_vendor: nvidia`` is written out, and
    a step that asks for no GPU refuses it)."""
    try:
        steps = json.loads(spec_json).get("steps", {})
    except (ValueError, AttributeError):
        return {}
    return {n: s for n, s in steps.items() if isinstance(s, dict)} if isinstance(steps, dict) else {}


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
