"""Knowing the moment a container exits, without asking the engine over and over.

A run's executor used to start each container with ``podman run -d``, learn of exits from
``podman events`` (whose file backend is read every 250 ms), then ask ``podman wait``,
``podman ps`` and ``podman inspect`` in turn: five processes and about a quarter second
per step more than a shell loop of ``podman run``.  Now, as that loop does, each container
is started by an attached ``podman run`` (``ExitWatch.attach``) whose exit is the
container's, on a follower thread; an error of podman's own (exit 125 to 127 with an
``Error:`` line) becomes the attempt's reason.  The run's containers are known without
``ps``; what an attempt used (``inspect``, its cgroup) is read later, off this path, just
before its container is removed, and removals go in batches (``Batches``): every podman
command takes podman's lock, so one per finished step would slow the next start.

Containers this executor did not start (a resumed run adopts them) are followed through
their monitor: podman's conmon, whose PID ``inspect`` gives, through a pidfd
(``os.pidfd_open``), which costs nothing while the step runs; once conmon has gone,
``podman wait`` answers at once.  Without a monitor to follow (docker, an old kernel) the
engine's own ``wait`` does it all.  One the engine no longer has is dropped, so the runner
reports it disappeared.

``ExitWatch`` is one run's: started by ``CliEngine.watch`` and closed by the stopper it
returns; closing waits for the removals.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from hetflow.execute.engine import NEVER_STARTED

Inspect = Callable[[str], "Mapping[str, Any] | None"]  # one ``inspect`` entry, None when gone
Unstarted = Callable[[str], bool]  # the container never started (what it left is reaped: ``orphans``)
WaitCommand = Callable[[str, str], list[str]]  # the engine's ``wait NAME`` argv, polling at an interval
T = TypeVar("T")
TAIL = 4096  # bytes of an attached run's stderr kept, for the engine's error
ERROR_CODE = 125  # podman's and docker's exit code for their own failures


@dataclass(frozen=True)
class Exited:
    """How a container ended (an exited container is not running: no flag says so)."""

    status: str
    exit_code: int | None
    reason: str = ""  # the engine's own error, when it refused to start the container


def monitor_alive(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether ``pid`` is still a container monitor (conmon), not a process that took its
    number after it exited."""
    try:
        return (proc / str(pid) / "comm").read_text().strip() == "conmon"
    except OSError:
        return False


class Batches(Generic[T]):
    """Items handled on one thread in batches: each batch is everything given while the
    one before was being handled, in order.  Under many short steps the batches grow, so
    one ``rm`` removes many containers; with long steps each goes at once.  ``close``
    waits for every item given before."""

    def __init__(self, name: str, handle: Callable[[list[T]], None]) -> None:
        self._handle = handle
        self._items: list[T] = []
        self._cond = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def put(self, item: T) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closing:
                    self._cond.wait()
                batch, self._items = self._items, []
                if not batch:
                    return  # closing, and nothing left
            with contextlib.suppress(Exception):  # a removal that fails leaves a container, as before
                self._handle(batch)

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()


class ExitWatch:
    """One run's containers, as the engine last said, kept current by a follower per container."""

    def __init__(
        self,
        *,
        inspect: Inspect,
        wait_command: WaitCommand,
        wake: Callable[[], None],
        env: Mapping[str, str],
        unstarted: Unstarted = lambda _name: False,
    ):
        self._inspect, self._wait_command, self._wake, self._env = inspect, wait_command, wake, env
        self._unstarted = unstarted
        self._lock = threading.Lock()
        self._labels: dict[str, Mapping[str, str]] = {}
        self._exited: dict[str, Exited] = {}
        self._closed = False
        self._waiters: set[subprocess.Popen[Any]] = set()

    # --- what the runner asks ------------------------------------------------------------

    def snapshot(self) -> dict[str, tuple[bool, int | None, str, Mapping[str, str], str]]:
        """name -> (running, exit code, status, labels, reason) for every container followed."""
        with self._lock:
            out: dict[str, tuple[bool, int | None, str, Mapping[str, str], str]] = {}
            for name, labels in self._labels.items():
                e = self._exited.get(name)
                out[name] = (
                    (True, None, "running", labels, "")
                    if e is None
                    else (False, e.exit_code, e.status, labels, e.reason)
                )
            return out

    def exited(self, name: str) -> bool:
        """Whether the container (or the attached run that was to start it) has exited."""
        with self._lock:
            return name in self._exited

    def running(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` it follows whose exit it has not learnt yet."""
        with self._lock:
            return [n for n in names if n in self._labels and n not in self._exited]

    def forget(self, names: Iterable[str]) -> None:
        with self._lock:
            for n in names:
                self._labels.pop(n, None)
                self._exited.pop(n, None)

    # --- what the engine tells it --------------------------------------------------------

    def follow(self, name: str, labels: Mapping[str, str], monitor_pid: int | None) -> None:
        """A container of the run is running: learn when it exits."""
        with self._lock:
            self._labels[name] = dict(labels)
            self._exited.pop(name, None)
        threading.Thread(target=self._follow, args=(name, monitor_pid), name=f"exit-{name}", daemon=True).start()

    def attach(
        self, name: str, labels: Mapping[str, str], argv: list[str], *, engine: str, cwd: str | None = None
    ) -> None:
        """Start the container with an attached ``run`` (``argv``), which exits with the
        container's code; learn its exit from that.  ``cwd``: where the engine runs (conmon
        writes a file named ``oom`` into its working directory when the OOM killer strikes,
        so that should be the attempt's own folder, not wherever hetflow was started)."""
        with self._lock:
            self._labels[name] = dict(labels)
            self._exited.pop(name, None)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # the step's output is in its log file
                stderr=subprocess.PIPE,  # the engine's error, should it refuse (and the step's stderr)
                env=dict(self._env),
                cwd=cwd,
                start_new_session=True,  # a Ctrl-C to hetflow is not one to its containers
            )
        except OSError as exc:
            self._record(name, ERROR_CODE, f"{engine} could not start {name}: {exc}")
            return
        with self._lock:
            self._waiters.add(proc)
        threading.Thread(
            target=self._follow_attached, args=(name, proc, engine), name=f"run-{name}", daemon=True
        ).start()

    def known_exit(self, name: str, labels: Mapping[str, str], status: str, exit_code: int | None) -> None:
        """A container of the run that had exited before the watch began (a resumed run), or
        one that never started (``NEVER_STARTED``, no exit code)."""
        with self._lock:
            self._labels[name] = dict(labels)
            self._exited[name] = Exited(status, exit_code)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # followers look at it at least once a second
        with self._lock:
            waiters = list(self._waiters)
        for p in waiters:
            _kill(p)

    # --- followers -----------------------------------------------------------------------

    def _follow_attached(self, name: str, proc: subprocess.Popen[bytes], engine: str) -> None:
        tail = b""
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        while chunk := os.read(fd, 65536):
            tail = (tail + chunk)[-TAIL:]
        proc.stderr.close()
        code = proc.wait()
        with self._lock:
            self._waiters.discard(proc)
        if self._closed:
            return
        if code < 0:  # the attached run itself was killed, not the container: ask the engine
            if self._unstarted(name):  # killed before it started the container: nobody will
                with self._lock:
                    if not self._closed and name in self._labels:
                        self._exited[name] = Exited(NEVER_STARTED, None)
                self._wake()
                return
            self._follow(name, None)
            return
        reason = ""
        if code in (125, 126, 127):  # the engine's own failures (podman-run(1), EXIT STATUS)
            errors = [ln for ln in tail.decode(errors="replace").splitlines() if ln.startswith("Error")]
            if errors:
                reason = f"{engine} could not start {name}: {errors[-1]}"
        self._record(name, code, reason)

    def _record(self, name: str, code: int, reason: str = "") -> None:
        with self._lock:
            if self._closed or name not in self._labels:
                return
            self._exited[name] = Exited("exited", code, reason)
        self._wake()

    def _follow(self, name: str, pid: int | None) -> None:
        try:
            code = self._await_exit(name, pid)
        except _Closing:
            return
        if code is None:  # the engine's wait failed: does it still have the container?
            entry = self._inspect(name)
            if entry is not None:
                code = int((entry.get("State") or {}).get("ExitCode", 0) or 0)
        with self._lock:
            if self._closed or name not in self._labels:
                return
            if code is None:
                self._labels.pop(name, None)  # the engine no longer has it: the runner says so
            else:
                self._exited[name] = Exited("exited", code)
        self._wake()

    def _await_exit(self, name: str, pid: int | None) -> int | None:
        """The container's exit code once it has exited; None when the engine's ``wait``
        failed.  The monitor's pidfd costs nothing while the step runs; once the monitor
        has gone, ``wait`` answers at once.  Without a monitor to follow, ``wait`` polls."""
        if not self._await_monitor(pid):
            return self._engine_wait(name, "250ms")
        return self._engine_wait(name, "10ms")

    def _await_monitor(self, pid: int | None) -> bool:
        """Block until the monitor process has gone (True), or say it cannot be followed
        (False: no PID, no pidfds on this kernel).  Raises _Closing when the watch closes."""
        if pid is None:
            return False
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return True  # gone already
        except OSError:
            return False  # no pidfds here (kernel before 5.3)
        try:
            if not monitor_alive(pid):
                return True
            while not self._closed:
                ready, _, _ = select.select([fd], [], [], 1.0)
                if ready:
                    return True
            raise _Closing
        finally:
            os.close(fd)

    def _engine_wait(self, name: str, interval: str) -> int | None:
        """``podman wait`` (or docker's): the exit code, or None when it failed.  Raises
        _Closing when the watch closes."""
        if self._closed:
            raise _Closing
        try:
            proc = subprocess.Popen(
                self._wait_command(name, interval),
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                env=dict(self._env),
                text=True,
                start_new_session=True,  # a Ctrl-C to hetflow is not one to its waiters
            )
        except OSError:
            return None
        with self._lock:
            self._waiters.add(proc)
        try:
            out, _ = proc.communicate()
        finally:
            with self._lock:
                self._waiters.discard(proc)
        if self._closed:
            raise _Closing
        text = out.strip().splitlines()[-1] if out.strip() else ""
        return int(text) if proc.returncode == 0 and text.lstrip("-").isdigit() else None


class _Closing(Exception):
    """The watch closed while a follower waited."""


def _kill(proc: subprocess.Popen[Any]) -> None:
    """A waiter and whatever it started (its own session: ``start_new_session``)."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
