"""Where step attempts run: this machine (podman), Slurm, Ray; and a fake for unit tests.

The contract is ``base.py`` (after snakemake's executor plugins): a ``Backend`` runs step
attempts (``Job``) with ``check``, ``image_exists``, ``submit``, ``poll`` (``JobState`` by
name, which is also how a restarted runner adopts what still runs), ``cancel``,
``release`` and an optional ``watch``; its ``Capabilities`` say what the engine does
itself (orders dependencies, assigns GPUs, spans nodes).  ``factory.make_backend`` makes
every backend, local included (given the run's container engine); what only one backend
can do is a ``runtime_checkable`` protocol beside ``Backend`` (``MeasuresUsage``,
``MeasuresOnRelease``, ``DropsNetworks``) that callers test with ``isinstance``.

One package per engine, each shaped alike: ``plugin.py`` (its ``BackendPlugin``: name,
help line, capabilities, settings class, variables, dispatch), ``settings.py`` (a frozen
settings dataclass read from its section of the run's settings), ``translate.py`` (Job ->
the engine's objects, pure), ``backend.py`` (submit, poll, cancel, release).  ``registry``
lists the plugin modules and is the only place that names a backend: the settings file,
``make_backend`` and the command line read it.  To add a backend: make such a package, add
its plugin module to ``registry.MODULES``, and subclass the contract suite
(``tests/contract/backend_contract.py``) in a test.  ``fake.py`` is a backend in memory
that interprets the few shell commands tests use; it passes the contract in the unit tests.

Every name here (and in each backend package) loads on first use, so reading the registry
imports no engine's client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.base import Backend, Job, JobState, MeasuresUsage
    from hetflow.execute.backends.capabilities import Capabilities
    from hetflow.execute.backends.factory import make_backend
    from hetflow.execute.backends.fake import FakeBackend, FakeState
    from hetflow.execute.backends.local.backend import LocalBackend
    from hetflow.execute.backends.plugin import BackendPlugin

_WHERE = {
    "base": ["Backend", "Job", "JobState", "MeasuresUsage"],
    "capabilities": ["Capabilities"],
    "plugin": ["BackendPlugin"],
    "factory": ["make_backend"],
    "fake": ["FakeBackend", "FakeState"],
    "local.backend": ["LocalBackend"],
}

__all__ = [
    "Backend",
    "BackendPlugin",
    "Capabilities",
    "FakeBackend",
    "FakeState",
    "Job",
    "JobState",
    "LocalBackend",
    "MeasuresUsage",
    "make_backend",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
