"""Where step attempts run: this machine (podman), Slurm, Ray; and a fake for unit tests.

The contract is ``base.py`` (after snakemake's executor plugins): a ``Backend`` runs step
attempts (``Job``) with ``check``, ``image_exists``, ``submit``, ``poll`` (``JobState`` by
name, which is also how a restarted runner adopts what still runs), ``cancel``,
``release`` and an optional ``watch``; its ``Capabilities`` say what the engine does
itself (orders dependencies, assigns GPUs, spans nodes).  ``factory.make_backend`` makes
every backend, local included (given the run's container engine); what only one backend
can do is a ``runtime_checkable`` protocol beside ``Backend`` (``MeasuresUsage``,
``MeasuresOnRelease``, ``DropsNetworks``) that callers test with ``isinstance``.

One package per engine, each shaped alike: ``settings.py`` (a frozen settings dataclass
read from the run's Settings), ``translate.py`` (Job -> the engine's objects, pure),
``backend.py`` (submit, poll, cancel, release).  To add a backend: make such a package,
register it in ``factory.make_backend`` (importing it lazily there, as Slurm and Ray are:
their clients are heavy or optional), and subclass the contract suite
(``tests/contract/backend_contract.py``) in a test.  ``fake.py`` is a backend in memory
that interprets the few shell commands tests use; it passes the contract in the unit tests.
"""

from hetflow.execute.backends.base import Backend, Capabilities, Job, JobState, MeasuresUsage
from hetflow.execute.backends.factory import make_backend
from hetflow.execute.backends.fake import FakeBackend, FakeState
from hetflow.execute.backends.local import LocalBackend

__all__ = [
    "Backend",
    "Capabilities",
    "FakeBackend",
    "FakeState",
    "Job",
    "JobState",
    "LocalBackend",
    "MeasuresUsage",
    "make_backend",
]
