"""The backend a run uses, from its settings (the same for run, resume, stop): the one place
a backend is made, local included, so that every caller gets the same seam."""

from __future__ import annotations

from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.local import LocalBackend
from hetflow.execute.engine import ContainerEngine
from hetflow.execute.settings import Settings


def make_backend(settings: Settings | None = None, *, engine: ContainerEngine | None = None) -> Backend:
    """The backend ``settings`` name (None: the local one).  ``engine``: the container engine
    a local backend drives (a run's own, or a test's fake); None: this machine's podman or
    docker.  A cluster backend runs containers on its nodes and takes no engine here."""
    name = settings.backend if settings is not None else "local"
    if name == "slurm" and settings is not None:
        from hetflow.execute.backends.slurm import SlurmBackend, SlurmSettings

        return SlurmBackend(SlurmSettings.from_backend(settings))
    if name == "ray" and settings is not None:
        from hetflow.execute.backends.ray import RayBackend, RaySettings

        return RayBackend(RaySettings.from_backend(settings))
    if name == "kubernetes" and settings is not None:
        from hetflow.execute.backends.kubernetes import KubernetesBackend, KubernetesSettings

        return KubernetesBackend(KubernetesSettings.from_backend(settings))
    return LocalBackend(engine)
