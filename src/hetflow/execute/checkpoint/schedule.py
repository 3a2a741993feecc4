"""A step's periodic CRIU checkpoints (``checkpoint: {every: 10m}``), off the runner's path.

Each pass of the runner's loop asks ``tick`` which running attempts are due (``every`` after
the attempt started or its last checkpoint) and hands them to one background thread, which
dumps each container with ``--leave-running`` (its /out copied while it is frozen for the
dump: ``freeze``) and makes the dump the attempt's checkpoint (``CheckpointImages.commit``).
What happened comes back to the runner's thread (the store is written there only) as notes:
"checkpoint 3 of count: 1.2 MiB in 0.41 s", or why one failed.
A dump that fails because the attempt just ended is not a failure worth a note.
"""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hetflow.errors import HetflowError
from hetflow.execute.checkpoint.images import CheckpointImages, Saved
from hetflow.spec import Checkpoint, format_bytes


class Dumps(Protocol):
    """What dumps a container (``backends.base.Checkpoints``)."""

    def checkpoint(
        self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
    ) -> float: ...


class Intervals:
    """When each running container is next due: ``every`` seconds after it was first seen
    or last done (a periodic dump here, a save request in ``appcheckpoint.SaveRequests``)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}  # container -> when first seen or last done

    def due(self, container: str, every: float, now: float) -> bool:
        return now - self._last.setdefault(container, now) >= every

    def done(self, container: str, now: float) -> None:
        self._last[container] = now

    def keep_only(self, containers: set[str]) -> None:
        """Forget the containers no longer running."""
        for gone in set(self._last) - containers:
            del self._last[gone]


@dataclass(frozen=True)
class Due:
    step: str
    attempt: int
    container: str


@dataclass(frozen=True)
class Done:
    due: Due
    saved: Saved | None
    error: str = ""

    def message(self) -> str:
        if self.saved is None:
            said = self.error if self.due.container in self.error else f"{self.due.container}: {self.error}"
            return f"checkpoint failed: {said}; the last good one stays"
        s = self.saved
        return f"checkpoint of {s.container}: {format_bytes(s.size)} in {s.seconds:.2f}s (kept as {Path(s.image).name})"


class Checkpointer:
    def __init__(self, images: CheckpointImages, setting: Callable[[str], Checkpoint | None], dump: Dumps) -> None:
        """``setting``: a step's ``checkpoint`` (only a transparent one with ``every`` counts)."""
        self.images, self.setting, self.dump = images, setting, dump
        self._every = Intervals()  # from when each container started or was last dumped (monotonic)
        self._busy: set[str] = set()
        self._work: queue.Queue[Due | None] = queue.Queue()
        self._done: queue.Queue[Done] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def tick(self, running: Iterable[tuple[str, int, str]], now: float | None = None) -> list[Done]:
        """Queue the dumps due among ``running`` (step, attempt, container); returns the
        dumps finished since the last tick."""
        now = time.monotonic() if now is None else now
        seen = set()
        for step, attempt, container in running:
            c = self.setting(step)
            if c is None or c.every is None or not c.transparent:
                continue
            seen.add(container)
            if self._every.due(container, c.every, now) and container not in self._busy:
                self._busy.add(container)
                self._start()
                self._work.put(Due(step, attempt, container))
        self._every.keep_only(seen | self._busy)
        done: list[Done] = []
        while True:
            try:
                d = self._done.get_nowait()
            except queue.Empty:
                return done
            self._busy.discard(d.due.container)
            self._every.done(d.due.container, now)
            if d.saved is not None or d.due.container in seen:  # a dump of what just ended: no news
                done.append(d)

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="checkpoints", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while (due := self._work.get()) is not None:
            try:
                done = self.take(due)
            except Exception as exc:  # a bug must not end the thread and leave due busy for good
                done = Done(due, None, f"{type(exc).__name__}: {exc}")
            self._done.put(done)

    def exclusive(self) -> threading.Lock:
        """Held while a dump runs: ``hetflow migrate`` takes it so that its dump is never
        overtaken by an older periodic one of the same container."""
        return self._lock

    def take(self, due: Due) -> Done:
        """One dump, made the attempt's checkpoint when it succeeds."""
        with self._lock:
            return self._take(due)

    def _take(self, due: Due) -> Done:
        part = self.images.part(due.step, due.attempt)
        outputs = self.images.outputs_part(due.step, due.attempt)
        try:
            seconds = self.dump.checkpoint(due.container, part, leave_running=True, outputs=outputs)
            return Done(due, self.images.commit(due.step, due.attempt, due.container, part, seconds, outputs[1]))
        except (HetflowError, OSError) as exc:
            part.unlink(missing_ok=True)
            shutil.rmtree(outputs[1], ignore_errors=True)
            return Done(due, None, str(exc))

    def close(self) -> None:
        if self._thread is not None:
            self._work.put(None)
            self._thread.join(timeout=60)
            self._thread = None
