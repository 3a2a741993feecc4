"""Run notifications: ``hetflow run --notify URL`` (or ``notify:`` in the settings file) POSTs
one JSON object to each URL when a step fails (its last attempt failed) and when the run ends
(succeeded, failed or stopped), as Nextflow's weblog does.

A ``Notifier`` follows the run's event stream on a thread of its own, with its own store
connections, so a slow or dead endpoint never holds up the run: each POST has a timeout and
is tried again (a connection error, a timeout, a 5xx or 429 answer) after a growing backoff;
a POST that still fails becomes a ``Note`` in the run's events (kind ``notify-failed``), and
the run goes on.  When the run has ended, the executor waits for the last POSTs at most
``Notify.budget`` seconds.

The payload (``payload``; a ``version`` field grows with it)::

    {"version": 1, "event": "step-failed" | "run-ended", "run_id": "5053de87",
     "workflow": "align", "state": "failed", "step": "count" | null, "attempt": 2 | null,
     "exit_code": 3 | null, "message": "...", "time": 1795756165.9, "started": ..., "ended": ...,
     "show": "hetflow show 5053de87"}

``state`` is the step's for ``step-failed`` and the run's for ``run-ended``; every text is
masked of the step secrets this process knows (``secrets.mask``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hetflow.errors import UsageError
from hetflow.execute.secrets import mask
from hetflow.state import (
    FAILED,
    RUN_TERMINAL,
    Note,
    RunEvent,
    RunRecord,
    RunStateChanged,
    RunWatch,
    StepStateChanged,
    Store,
)
from hetflow.state import record as record_event

PAYLOAD_VERSION = 1
STEP_FAILED, RUN_ENDED = "step-failed", "run-ended"
NOTIFY_FAILED = "notify-failed"  # the Note kind of a notification that could not be delivered

Post = Callable[[str, Mapping[str, Any], float], int]  # (url, payload, timeout) -> HTTP status; raises on no answer


def check_urls(urls: Sequence[str], where: str = "--notify") -> tuple[str, ...]:
    """Each URL as given, or UsageError naming the first that is not http(s)://HOST[...]."""
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"{where} {url!r}: give an http:// or https:// URL with a host, e.g. http://host:8080/hook"
            )
    return tuple(urls)


def urls_of(value: str | Sequence[str]) -> tuple[str, ...]:
    """``notify:`` as the settings file gives it: one URL or a list."""
    return (value,) if isinstance(value, str) else tuple(str(u) for u in value)


def start_notifier(store_path: Path, run_id: str, urls: str | Sequence[str]) -> Notifier | None:
    """A started Notifier for the run's URLs (None without any)."""
    if not urls_of(urls):
        return None
    notifier = Notifier(store_path, run_id, Notify(urls_of(urls)))
    notifier.start()
    return notifier


def httpx_post(url: str, payload: Mapping[str, Any], timeout: float) -> int:
    import httpx  # here, not at the top: `hetflow run --dry-run` checks URLs and posts nothing

    return httpx.post(url, json=dict(payload), timeout=timeout, follow_redirects=False).status_code


@dataclass(frozen=True)
class Notify:
    """Where to POST and how hard to try."""

    urls: tuple[str, ...]
    timeout: float = 5.0  # seconds for one POST (connect, write and read each: httpx's timeout)
    tries: int = 3
    backoff: float = 0.5  # seconds before the second try, doubled for each one after

    @property
    def budget(self) -> float:
        """The longest the last notifications may take, for each URL."""
        waits = sum(self.backoff * (1 << i) for i in range(self.tries - 1))
        return len(self.urls) * (self.tries * self.timeout + waits) + 1.0


def payload(
    event: str,
    run: RunRecord,
    *,
    state: str,
    message: str,
    time: float,
    step: str | None = None,
    attempt: int | None = None,
    exit_code: int | None = None,
) -> dict[str, Any]:
    """The JSON object POSTed for ``event`` of ``run`` (see the module's docstring)."""
    return {
        "version": PAYLOAD_VERSION,
        "event": event,
        "run_id": run.id,
        "workflow": run.name,
        "state": state,
        "step": step,
        "attempt": attempt,
        "exit_code": exit_code,
        "message": mask(message),
        "time": time,
        "started": run.started,
        "ended": run.ended,
        "show": f"hetflow show {run.id}",
    }


class Notifier:
    """POSTs one run's step failures and end, from a thread that follows its events.  Use
    ``start`` before the run executes and ``finish`` after; ``post`` and ``sleep`` are seams."""

    def __init__(
        self,
        store_path: Path,
        run_id: str,
        notify: Notify,
        *,
        post: Post = httpx_post,
        sleep: Callable[[float], None] = time.sleep,
        interval: float = 0.2,
    ) -> None:
        self.store_path, self.run_id, self.notify = store_path, run_id, notify
        self.post, self.sleep, self.interval = post, sleep, interval
        self._done = threading.Event()  # the run has ended: read what is left, then stop
        self._thread: threading.Thread | None = None
        self._after = 0
        self.sent: list[dict[str, Any]] = []  # what was delivered, for the executor's log and tests

    def start(self) -> None:
        """Begin after the events already stored (a resume does not repeat old failures)."""
        reader = Store(self.store_path, read_only=True)
        try:
            watch = RunWatch(reader, self.run_id)
            watch.poll()
            self._after = watch.cursor
        finally:
            reader.close()
        self._thread = threading.Thread(target=self._follow, name=f"notify-{self.run_id}", daemon=True)
        self._thread.start()

    def finish(self) -> None:
        """The run has ended: wait (at most the budget) for its last notifications."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(self.notify.budget)

    def _follow(self) -> None:
        reader = Store(self.store_path, read_only=True)
        try:
            watch = RunWatch(reader, self.run_id, self._after)
            while True:
                last = self._done.is_set()
                for event in watch.poll():
                    body = self._payload(reader, event)
                    if body is not None:
                        self.deliver(body)
                if watch.ended or last:
                    return
                self.sleep(self.interval)
        finally:
            reader.close()

    def _payload(self, reader: Store, event: RunEvent) -> dict[str, Any] | None:
        run = reader.run(self.run_id)
        if isinstance(event, RunStateChanged) and event.state in RUN_TERMINAL:
            return payload(RUN_ENDED, run, state=event.state, message=run.message or event.message, time=event.time)
        if isinstance(event, StepStateChanged) and event.state == FAILED:
            step = next((s for s in reader.steps(self.run_id) if s.step == event.step), None)
            return payload(
                STEP_FAILED,
                run,
                state=FAILED,
                step=event.step,
                attempt=step.attempts if step is not None else None,
                exit_code=step.exit_code if step is not None else None,
                message=step.reason if step is not None and step.reason else event.message,
                time=event.time,
            )
        return None

    def deliver(self, body: dict[str, Any]) -> None:
        """POST ``body`` to every URL; one that cannot be delivered becomes a note."""
        for url in self.notify.urls:
            why = self.try_post(url, body)
            if why is None:
                self.sent.append(body)
                continue
            what = body["event"] + (f" of step {body['step']}" if body["step"] else "")
            self._note(f"notification ({what}) to {_shown(url)} failed after {self.notify.tries} tries: {why}")

    def try_post(self, url: str, body: Mapping[str, Any]) -> str | None:
        """None once delivered (a 2xx), else why the last try failed."""
        import httpx

        why = ""
        for n in range(self.notify.tries):
            if n:
                self.sleep(self.notify.backoff * (1 << (n - 1)))
            try:
                status = self.post(url, body, self.notify.timeout)
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            if 200 <= status < 300:
                return None
            why = f"HTTP {status}"
            if status < 500 and status != 429:
                return why  # a client error does not mend by asking again (RFC 9110 15.5)
        return why

    def _note(self, text: str) -> None:
        """A notification that failed, as a Note in the run's events (a writer of its own:
        the executor's store connection belongs to its thread)."""
        try:
            writer = Store(self.store_path)
        except Exception:
            return
        try:
            record_event(writer, Note(0, self.run_id, time.time(), text, None, NOTIFY_FAILED))
        except Exception:
            pass
        finally:
            writer.close()


def _shown(url: str) -> str:
    """The URL without what may be a credential (user info, query): for the run's events."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
