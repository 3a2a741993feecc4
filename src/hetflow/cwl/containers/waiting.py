"""Waiting on many jobs of one run with one poller: cwltool runs each job on a thread of its
own, and a ``podman ps`` per thread per tick would cost more than the jobs.

The waiter starts (``Waiter.start``: the backend's watch of the run) before the run's first
job is submitted: podman's exit watch follows the containers started while it exists, and
lists the run's containers once when it begins; a job submitted before it began, whose
``podman run -d`` had not made its container by that listing, was followed by nobody and
its thread waited for ever (CI saw a scatter's job exit and the runner hang)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from hetflow.errors import HetflowError
from hetflow.execute import Backend, JobState

_logger = logging.getLogger("cwltool")

POLL_SECONDS = 1.0  # the longest a finished job waits to be seen where the backend cannot wake us


class Waiter:
    """Polls ``backend`` for ``run_id`` while anyone waits; wakes early when the backend can
    say a job ended (``Backend.watch``)."""

    def __init__(self, backend: Backend, run_id: str) -> None:
        self.backend = backend
        self.run_id = run_id
        self._lock = threading.Lock()
        self._waiting: dict[str, threading.Event] = {}
        self._done: dict[str, JobState] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._unwatch: Callable[[], None] | None = None
        self._closed = False

    def wait(self, name: str, timeout: float | None = None) -> JobState | None:
        """The job's final state; None when ``timeout`` seconds passed first."""
        event = threading.Event()
        self.start()
        with self._lock:
            self._waiting[name] = event
        self._wake.set()
        finished = event.wait(timeout)
        with self._lock:
            self._waiting.pop(name, None)
            return self._done.pop(name, None) if finished else None

    def start(self) -> None:
        """Watch the run (from now on, every job submitted is seen to end) and poll it."""
        with self._lock:
            if self._thread is None:
                self._unwatch = self.backend.watch(self.run_id, self._wake.set)
                self._thread = threading.Thread(target=self._loop, name=f"cwl-wait-{self.run_id}", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()
            with self._lock:
                wanted = dict(self._waiting)
            if not wanted:
                continue
            try:
                states = self.backend.poll(self.run_id)
            except Exception as exc:  # a slow or busy engine: ask again, never leave a waiter hanging
                _logger.warning("polling run %s: %s", self.run_id, exc if isinstance(exc, HetflowError) else repr(exc))
                time.sleep(POLL_SECONDS)
                self._wake.set()
                continue
            with self._lock:
                for name, event in wanted.items():
                    st = states.get(name)
                    if st is not None and not st.running:
                        self._done[name] = st
                        event.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._unwatch is not None:
            self._unwatch()
