"""The backend a run uses, from its settings (the same for run, resume, stop)."""

from __future__ import annotations

from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.local import LocalBackend
from hetflow.execute.settings import Settings


def make_backend(settings: Settings) -> Backend:
    if settings.backend == "slurm":
        from hetflow.execute.backends.slurm import SlurmBackend, SlurmSettings

        return SlurmBackend(SlurmSettings.from_backend(settings))
    if settings.backend == "ray":
        from hetflow.execute.backends.ray import RayBackend, RaySettings

        return RayBackend(RaySettings.from_backend(settings))
    return LocalBackend()
