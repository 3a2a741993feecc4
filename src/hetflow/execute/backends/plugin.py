"""What a backend declares of itself (after snakemake's executor plugins, whose plugin
modules each declare an ``ExecutorSettings`` and ``CommonSettings`` the core reads).

Each backend package has a ``plugin`` module with one ``PLUGIN = BackendPlugin(...)``, and
``registry`` lists those modules: the settings file's sections, the environment variables,
the command line's ``--backend`` help, how a run is dispatched and which backend class is
made are all read from there, so the rest of hetflow names no backend.  A plugin module
imports nothing heavy (it is read on every command line): its backend and settings classes
are named by import path and loaded only when a run uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hetflow.execute.backends.capabilities import Capabilities

if TYPE_CHECKING:
    from hetflow.execute.backends.base import Backend
    from hetflow.execute.engine import ContainerEngine

# How a run's ready steps find their place (the ``RunPlan.kind`` stored with a run): on this
# machine by its free capacity and GPU leases, or where the plan put them on a cluster's nodes.
LEASES = "local"
PLAN = "cluster"


class RunSettings(Protocol):
    """What a backend reads of a run's settings (``execute.settings.Settings``)."""

    @property
    def backend(self) -> str: ...
    @property
    def engine(self) -> str: ...  # the container engine (on the nodes, for a cluster)
    @property
    def workdir(self) -> str | None: ...  # the shared work directory

    def section(self, name: str) -> Mapping[str, Any]:
        """The backend's own section (``slurm: {...}``): YAML values, or strings from the environment."""


class MakesBackend(Protocol):
    """A backend class, as a plugin names it."""

    @classmethod
    def from_settings(cls, settings: RunSettings, engine: ContainerEngine | None) -> Backend:
        """The backend for a run's settings; ``engine``: this machine's container engine
        (a run's own or a test's fake), which only a backend running steps here uses."""


class ReadsSection(Protocol):
    """A backend's settings class (a frozen dataclass, one field per key of its section)."""

    __dataclass_fields__: Mapping[str, Any]


class ListsNodes(Protocol):
    """A cluster whose nodes the engine lists (Kubernetes' API server): what hetflow plans on
    without a cluster file, and what ``hetflow nodes --backend NAME`` prints."""

    @property
    def title(self) -> str: ...  # the cluster, as messages name it ("the ... cluster at HOST")

    def cluster(self) -> dict[str, Any]: ...  # a cluster file's mapping of its node types
    def nodes(self) -> list[Any]: ...
    def types(self) -> tuple[list[dict[str, Any]], dict[str, tuple[str, ...]]]: ...


@dataclass(frozen=True)
class BackendPlugin:
    """One backend, as the registry lists it."""

    name: str  # ``--backend NAME``, ``backend: NAME``, HETFLOW_BACKEND
    help: str  # one line, for ``--backend``'s help
    capabilities: Capabilities  # what the backend class says, declared here without loading it
    backend: str  # "module:Class" of its backend class (``MakesBackend``)
    # "module:Class" of its settings class, read from the settings file's section of the same
    # name (a key it has no field for is refused, naming the section); None: no section
    settings: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # HETFLOW_... variable -> key of its section
    cluster_file: bool = False  # it plans on a cluster file (--cluster, HETFLOW_CLUSTER, cluster:)
    # "module:function" giving ``ListsNodes`` for a run's settings: the engine lists its nodes
    nodes: str | None = None

    @property
    def section(self) -> str | None:
        """The settings file's key for this backend's own settings."""
        return self.name if self.settings is not None else None

    @property
    def dispatch(self) -> str:
        """``PLAN`` when the engine's nodes run the steps where the plan put them, else ``LEASES``."""
        return PLAN if self.capabilities.places_steps else LEASES
