"""The backends hetflow can run on: one plugin module per backend package, read lazily.

``MODULES`` is the one table that names them.  Reading a plugin imports only its small
``plugin`` module (``plugin.BackendPlugin``); the backend and its settings class, and with
them an engine's client (Ray, the Kubernetes loader), are imported when a run makes one
(``load``).  Everything else asks here: the settings file's sections and variables
(``execute.settings``), ``make_backend``, the command line's ``--backend`` help, how a run
is dispatched (``BackendPlugin.dispatch``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from hetflow.errors import UsageError
from hetflow.execute.backends.plugin import BackendPlugin, ListsNodes, MakesBackend, RunSettings

__all__ = [
    "DEFAULT_BACKEND",
    "MODULES",
    "backend_class",
    "backend_help",
    "backend_plugins",
    "by_name",
    "cluster_nodes",
    "load",
    "names",
    "section_keys",
    "sections",
]

DEFAULT_BACKEND = "local"  # the backend when nothing names one
# name -> the module declaring its ``PLUGIN``, in the order help lists them
MODULES: dict[str, str] = {
    "local": "hetflow.execute.backends.local.plugin",
    "slurm": "hetflow.execute.backends.slurm.plugin",
    "ray": "hetflow.execute.backends.ray.plugin",
    "kubernetes": "hetflow.execute.backends.kubernetes.plugin",
}


def names() -> tuple[str, ...]:
    return tuple(MODULES)


def backend_plugins() -> tuple[BackendPlugin, ...]:
    return tuple(by_name(n) for n in MODULES)


def by_name(name: str, *, where: str = "") -> BackendPlugin:
    """The registered backend ``name``; a UsageError naming the registered ones otherwise
    (``where``: where the name came from, for the message)."""
    module = MODULES.get(name)
    if module is None:
        said = f" ({where})" if where else ""
        raise UsageError(f"backend {name!r} is not one of {', '.join(MODULES)}{said}")
    plugin = importlib.import_module(module).PLUGIN
    assert isinstance(plugin, BackendPlugin) and plugin.name == name, f"{module}.PLUGIN is not backend {name!r}"
    return plugin


def backend_help() -> str:
    """``--backend``'s help: each backend and its line, the default first."""
    said = [f"{p.name}{' (default)' if p.name == DEFAULT_BACKEND else ''}: {p.help}" for p in backend_plugins()]
    return "; ".join(said) + "."


def load(path: str) -> Any:
    """The object a plugin names as "module:attribute" (imported now)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def backend_class(plugin: BackendPlugin) -> MakesBackend:
    made: MakesBackend = load(plugin.backend)
    return made


def section_keys(plugin: BackendPlugin) -> tuple[str, ...]:
    """The keys the backend's section takes: its settings class's fields (none without one)."""
    if plugin.settings is None:
        return ()
    cls = load(plugin.settings)
    assert is_dataclass(cls), f"{plugin.settings} is not a dataclass"
    return tuple(sorted(f.name for f in fields(cls)))


def cluster_nodes(settings: RunSettings) -> ListsNodes | None:
    """The nodes the settings' backend lists itself; None when it lists none."""
    plugin = by_name(settings.backend)
    if plugin.nodes is None:
        return None
    lister: ListsNodes = load(plugin.nodes)(settings)
    return lister


def sections() -> Mapping[str, BackendPlugin]:
    """Each settings-file section a backend reads, and its backend."""
    return {p.section: p for p in backend_plugins() if p.section is not None}
