"""Application checkpoints (``checkpoint: {mode: app}``): the folder a step saves its own
state in, and the SIGUSR1 that asks it to save, every ``checkpoint.every`` seconds.

The contract (docs/guides/checkpoints.md), the one Slurm requeue and Kubernetes preemption users
know: every attempt of the step sees ``RunPaths.app_checkpoint(step)`` read-write at
``TARGET`` and ``$HETFLOW_CHECKPOINT_DIR`` naming it.  It is the same folder for every
attempt, resume and retry (never cleared), under the run's work directory, which a cluster
shares between its nodes, so a Slurm or Ray attempt on another node finds it too.  A stop
sends SIGTERM ``stop_grace`` seconds before SIGKILL (``stopping``); with ``every``, hetflow
also sends ``SAVE_SIGNAL`` that often (``SaveRequests``, through a backend that can signal
its jobs: the local one, ``podman kill --signal USR1``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from hetflow.execute.checkpoint.schedule import Intervals
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.engine import Mount
from hetflow.spec import CHECKPOINT_ENV, Step

__all__ = [
    "CHECKPOINT_ENV",
    "SAVE_SIGNAL",
    "TARGET",
    "Running",
    "SaveRequests",
    "SignalsJobs",
    "app_checkpoint_env",
    "app_checkpoint_mounts",
    "is_app",
    "prepare_app_checkpoint",
]

TARGET = "/checkpoint"  # where every attempt sees the step's folder
SAVE_SIGNAL = "USR1"  # "save now": torchrun-elastic and most trainers leave SIGUSR1 to the app


def is_app(step: Step) -> bool:
    return step.checkpoint is not None and step.checkpoint.mode == "app"


def app_checkpoint_mounts(step_name: str, step: Step, paths: RunPaths) -> list[Mount]:
    """The step's checkpoint folder, read-write at ``TARGET`` (none unless ``mode: app``)."""
    return [Mount(str(paths.app_checkpoint(step_name)), TARGET, read_only=False)] if is_app(step) else []


def app_checkpoint_env(step: Step) -> dict[str, str]:
    return {CHECKPOINT_ENV: TARGET} if is_app(step) else {}


def prepare_app_checkpoint(step_name: str, step: Step, paths: RunPaths, uid: int, gid: int) -> Path | None:
    """Make the step's folder (kept as it is when it exists: the last attempt's state is
    what this one resumes from), owned by the run's user, who runs the container."""
    if not is_app(step):
        return None
    folder = paths.app_checkpoint(step_name)
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):  # not root: the folder is the caller's already
        os.chown(folder, uid, gid)
    return folder


@runtime_checkable
class SignalsJobs(Protocol):
    """A backend that can send a signal to running jobs (podman kill --signal)."""

    def signal(self, names: Iterable[str], sig: str) -> None:
        """Best effort: a job that ended meanwhile is skipped, not an error."""


class Running(Protocol):
    """An attempt in flight, as ``SaveRequests`` needs it (``attempts.Active`` is one)."""

    @property
    def step(self) -> str: ...

    @property
    def container(self) -> str: ...


class SaveRequests:
    """Asks running ``mode: app`` steps with ``every`` to save: ``SAVE_SIGNAL`` to each
    container once ``every`` seconds have passed since it was first seen running, or last
    asked.  ``due`` is pure (give it the clock's time); ``tick`` sends, through ``backend``
    when it can signal its jobs (else nothing: the step still saves on SIGTERM)."""

    def __init__(self, backend: object, clock: Callable[[], float]) -> None:
        self.backend, self.clock = backend, clock
        self.every = Intervals()  # from when each container was first seen or last asked

    def due(self, running: Iterable[Running], steps: Mapping[str, Step], now: float) -> list[str]:
        """The containers to ask now; forgets the ones no longer running."""
        out: list[str] = []
        seen: set[str] = set()
        for r in running:
            step = steps.get(r.step)
            if step is None or not is_app(step) or step.checkpoint is None or not step.checkpoint.every:
                continue
            seen.add(r.container)
            if self.every.due(r.container, step.checkpoint.every, now):
                out.append(r.container)
                self.every.done(r.container, now)
        self.every.keep_only(seen)
        return out

    def tick(self, running: Iterable[Running], steps: Mapping[str, Step]) -> list[str]:
        """Send ``SAVE_SIGNAL`` to the containers due; returns their names."""
        if not isinstance(self.backend, SignalsJobs):
            return []
        names = self.due(running, steps, self.clock())
        if names:
            self.backend.signal(names, SAVE_SIGNAL)
        return names
