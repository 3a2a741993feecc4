"""The backend a run uses, from its settings (the same for run, resume, stop): the one place
a backend is made, local included, so that every caller gets the same seam."""

from __future__ import annotations

from hetflow.execute.backends import registry
from hetflow.execute.backends.base import Backend
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.engine import ContainerEngine


class _Defaults:
    """The settings of a run that names nothing: the default backend, podman, no sections."""

    backend = registry.DEFAULT_BACKEND
    engine = "podman"
    workdir = None

    def section(self, name: str) -> dict[str, object]:
        return {}


def make_backend(settings: RunSettings | None = None, *, engine: ContainerEngine | None = None) -> Backend:
    """The backend ``settings`` name (None: the default one, ``registry.DEFAULT_BACKEND``), made by
    its plugin's class (``registry``).  ``engine``: the container engine a backend that runs
    steps on this machine drives (a run's own, or a test's fake); None: this machine's podman
    or docker.  A cluster backend runs containers on its nodes and takes no engine here."""
    chosen = settings if settings is not None else _Defaults()
    plugin = registry.by_name(chosen.backend)
    return registry.backend_class(plugin).from_settings(chosen, engine)
