"""The backend a run uses, from its settings (the same for run, resume, stop)."""

from __future__ import annotations

from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.local import LocalBackend
from hetflow.execute.settings import Settings


def make_backend(settings: Settings) -> Backend:
    if settings.backend == "slurm":
        from hetflow.execute.backends.slurm import SlurmBackend, SlurmSettings

        return SlurmBackend(
            SlurmSettings.from_mapping(settings.slurm, engine=settings.engine, workdir=settings.workdir)
        )
    if settings.backend == "ray":
        from hetflow.execute.backends.ray_backend import RayBackend, RaySettings

        return RayBackend(RaySettings.from_mapping(settings.ray, engine=settings.engine))
    return LocalBackend()
