"""Attempts' objects created on a small pool of client threads (issue 43).

``KubernetesBackend.submit`` used to make its API calls (the Job, then what it owns) one
attempt after another on the runner's thread: a hundred steps ready together took a hundred
round trips in a row, 1.47x the time of the same Jobs created by 16 clients at once.  Now it
hands each attempt's creates to ``Creations`` and returns; ``submit_threads`` (16) creates run
at once, each thread with its own connection (``KubeApi.http`` is per thread).

While its creation is in flight an attempt is in none of the API's lists, so ``states`` says
what ``poll`` should report for it: pending (never missing: the runner would take it for a job
that vanished), or, once the API refused one of its creates, the attempt's failure with the
API's message (``JobState.refused``: the runner fails it as it failed a ``submit`` that raised).
What the lists show is read against what was in flight *before* they were read, so a creation
that ends between the two is never taken for a job that vanished.

``settle`` is asked by ``cancel`` and ``release`` before they delete: a creation not begun is
withdrawn, one under way is waited for, so nothing is created after its Job was deleted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from hetflow.errors import HetflowError
from hetflow.execute.backends.base import JobState

CREATING = "Creating: its Job is being created through the API"
REFUSED = "Refused"


@dataclass(frozen=True)
class Seen:
    """A creation as it stood just before the API's lists were read."""

    future: Future[None]
    over: bool


class Creations:
    """One backend's creations in flight or ended, by job name (the attempt's container name)."""

    def __init__(self, threads: int, wake: Callable[[], object]) -> None:
        self._threads, self._wake = threads, wake  # ``wake``: a refusal is news no API watch brings
        self._pool: ThreadPoolExecutor | None = None  # started by the first ``start``
        self._lock = threading.Lock()
        self._work: dict[str, Future[None]] = {}

    def start(self, name: str, create: Callable[[], None]) -> None:
        """Run ``create`` (the attempt's API calls) on a pool thread; it raises HetflowError
        with the API's message when the API refuses."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="kube-create")
            self._work[name] = self._pool.submit(self._run, create)

    def _run(self, create: Callable[[], None]) -> None:
        try:
            create()
        except HetflowError:
            self._wake()
            raise

    def before_lists(self) -> dict[str, Seen]:
        """The creations known now, each with whether it was over: taken before ``poll`` lists."""
        with self._lock:
            return {name: Seen(f, f.done()) for name, f in self._work.items()}

    def states(self, seen: Mapping[str, Seen], listed: Collection[str]) -> dict[str, JobState]:
        """What ``poll`` reports for creations the lists (``listed``: the names they hold) cannot
        tell: a refused one's failure, an unlisted one in flight as pending.  One over before the
        lists and listed (or, created, not listed: deleted since, which the runner is to see) is
        forgotten.  An exception other than HetflowError is a bug: raised here, as ``submit``
        raised it before."""
        out: dict[str, JobState] = {}
        for name, s in seen.items():
            if s.future.cancelled():  # withdrawn by ``settle`` meanwhile
                continue
            error = s.future.exception() if s.future.done() else None
            if isinstance(error, HetflowError):
                out[name] = JobState(
                    name, running=False, exit_code=None, status=REFUSED, reason=str(error), refused=True
                )
            elif error is not None:
                raise error
            elif not s.over and name not in listed:
                out[name] = JobState(name, running=True, exit_code=None, status="PENDING", reason=CREATING)
            elif s.over:
                self._forget(name, s.future)
        return out

    def settle(self, names: Iterable[str]) -> None:
        """Withdraw the creations of ``names`` not begun and wait for those under way; forget them."""
        with self._lock:
            futures = [f for f in (self._work.pop(n, None) for n in names) if f is not None]
        wait([f for f in futures if not f.cancel()])

    def wait(self, names: Iterable[str]) -> None:
        """Wait until the creations of ``names`` are over (kept: ``states`` still reports them)."""
        with self._lock:
            futures = [f for f in (self._work.get(n) for n in names) if f is not None]
        wait(futures)

    def _forget(self, name: str, future: Future[None]) -> None:
        with self._lock:
            if self._work.get(name) is future:  # not a new creation under the same name
                del self._work[name]
