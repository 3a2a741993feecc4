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
``release`` is handed to threads of their own (``later``): its pods' logs read, then its Jobs
deleted on the client threads (``each``), while the runner goes on (the reads wait up to 2 s for
log streams kwok leaves open: 10 of a hundred steps' 18 seconds on the runner's thread); a
watch's close waits for them (``drain``), and an interpreter's exit does (``concurrent.futures``
joins its threads once their work is done).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TypeVar

from hetflow.errors import HetflowError
from hetflow.execute.backends.base import JobState

CREATING = "Creating: its Job is being created through the API"
REFUSED = "Refused"
T = TypeVar("T")


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
        self._releaser: ThreadPoolExecutor | None = None
        self._after: list[Future[None]] = []  # handed to ``later``, not yet seen over

    def start(self, name: str, create: Callable[[], None]) -> None:
        """Run ``create`` (the attempt's API calls) on a pool thread; it raises HetflowError
        with the API's message when the API refuses."""
        pool = self._threads_pool()
        with self._lock:
            self._work[name] = pool.submit(self._run, create)

    def each(self, work: Callable[[T], object], items: Iterable[T]) -> None:
        """``work(item)`` for every item on the same threads, waited for (a release's deletes:
        one after another they took a tenth of a second each); the first error is raised."""
        pool, futures = self._threads_pool(), []
        for item in items:
            try:
                futures.append(pool.submit(work, item))
            except RuntimeError:  # the interpreter exits (it waits for ``later``'s thread): here, then
                work(item)
        for f in futures:
            f.result()

    def later(self, work: Callable[[], None]) -> None:
        """``work`` on threads of their own, beside what was handed before (a release's wait for
        its logs does not hold the next one's back: 2 s each on kwok); an error one raised
        is raised here, by the next (as a release that raised on the caller's thread was)."""
        with self._lock:
            self._releaser = self._releaser or ThreadPoolExecutor(self._threads, thread_name_prefix="kube-release")
            over = [f for f in self._after if f.done()]
            self._after = [f for f in self._after if not f.done()]
            self._after.append(self._releaser.submit(work))
        for f in over:
            if (error := f.exception()) is not None:
                raise error

    def drain(self) -> None:
        """Wait for what was handed to ``later`` so far."""
        with self._lock:
            after = list(self._after)
        wait(after)

    def _threads_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                self._pool = self._pool or ThreadPoolExecutor(self._threads, thread_name_prefix="kube-client")
        return self._pool

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
