"""How long a stopped step may take to save its work, and who stops a run.

A stop gives each step's container a grace period: SIGTERM first, SIGKILL once the grace
is over (``podman stop --time N``, podman-stop(1); its default is 10 s, hetflow's too;
Slurm's is the cluster's KillWait, unless a grace is given).
``hetflow stop --grace 30s`` sets it for one stop; ``HETFLOW_STOP_GRACE`` for the stop an
executor makes itself when it gets SIGINT or SIGTERM.

``hetflow stop`` ends an executor with SIGTERM and stops the containers itself; so the
executor can tell that SIGTERM from one sent by systemd, Slurm, Kubernetes or ``timeout``
(after which it stops the run itself), the stopper first leaves a stop request in the
run's work directory (``RunPaths.stop_request``).  A new executor of the run (resume)
clears one left behind.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping

from hetflow.errors import UsageError
from hetflow.execute.data.paths import RunPaths

__all__ = [
    "DEFAULT_GRACE",
    "GRACE_ENV",
    "clear_stop_request",
    "grace_from_env",
    "parse_grace",
    "request_stop",
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
