"""The caller's side of the harness's fork servers (``tests.integration.forkserver``): ``Servers``
starts one per ``import_keys`` value met and runs a command through it as ``subprocess.run``
would (``capture_output=True, text=True``); ``hfkit.Hetflow`` falls back to a real subprocess
where it answers None."""

from __future__ import annotations

import contextlib
import json
import locale
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from tests.integration import forkserver
from tests.integration.forkserver import MODULE, READY, import_keys

OFF_ENV = "HFTEST_FORKSERVER"  # 0: every command a real subprocess, as before


Key = tuple[tuple[str, str | None], ...]
KEEP = 4  # servers at once: a test with an environment of its own (XDG_CACHE_HOME) starts one


class Servers:
    """This process's fork servers, one for each ``import_keys`` value met (the ``KEEP`` last
    used), started at first use and ended by ``close`` (the integration conftest's session
    fixture)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[Key, tuple[subprocess.Popen[bytes], str] | None] = {}  # least recently used first
        self._retired: list[subprocess.Popen[bytes]] = []
        self._folder: str | None = None
        self._count = 0

    def run(self, args: list[str], env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str] | None:
        """``python -m hetflow.cli.main ARGS`` run by a fork server, as ``subprocess.run`` would
        with ``capture_output=True, text=True``; None where a real subprocess must run it."""
        if os.environ.get(OFF_ENV) == "0" or not _has_stdin():
            return None
        path = self._server(env)
        return None if path is None else call(path, args, env, timeout)

    def _server(self, env: Mapping[str, str]) -> str | None:
        key = import_keys(env)
        with self._lock:
            if key not in self._started:
                self._folder = self._folder or tempfile.mkdtemp(prefix="hffork")
                self._count += 1
                self._started[key] = _start(os.path.join(self._folder, f"{self._count}.sock"), env)
            started = self._started[key] = self._started.pop(key)  # now the last used
            while len(self._started) > KEEP:
                oldest = self._started.pop(next(iter(self._started)))
                if oldest is not None:
                    self._retire(oldest[0])
        return None if started is None else started[1]

    @property
    def started(self) -> list[Key]:
        """The keys (``import_keys``) of the servers running."""
        with self._lock:
            return [key for key, started in self._started.items() if started is not None]

    def _retire(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None
        proc.stdin.close()  # its lifeline: the server stops listening, ends once its commands have
        self._retired.append(proc)

    def close(self) -> None:
        with self._lock:
            for started in self._started.values():
                if started is not None:
                    self._retire(started[0])
            self._started.clear()
            for proc in self._retired:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._retired.clear()
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None


def _has_stdin() -> bool:
    try:
        os.fstat(0)
    except OSError:
        return False
    return True


def _start(path: str, env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], str] | None:
    """A server at ``path`` started with ``env``, once it has imported the preload; None (and the
    reason on stderr) where it could not start: its caller then runs real subprocesses."""
    # Started as a script with the command's environment, so that its sys.path is a command's
    # (the child puts its working folder first, as `python -m` does); what it says goes to PATH.log.
    with open(f"{path}.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, forkserver.__file__, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    proc.stdout.close()
    if ready != READY:
        proc.kill()
        proc.wait()
        with open(f"{path}.log", errors="replace") as log:
            said = log.read()[-2000:]
        print(
            f"the harness's fork server did not start (exit {proc.returncode}): real subprocesses\n{said}",
            file=sys.stderr,
        )
        return None
    return proc, path


def call(path: str, args: list[str], env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str] | None:
    """``args`` run by the server at ``path``; None where it took no command (it had stopped
    listening: the caller runs a real subprocess)."""
    cmd = [sys.executable, "-m", MODULE, *args]
    request = {"argv": args, "env": dict(env), "cwd": os.getcwd(), "umask": _umask()}
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(path)
            socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, out_w, err_w])
            answers = conn.makefile("rb")
            word, _, pid = answers.readline().decode().partition(" ")
        except OSError:
            word = pid = ""
        finally:
            os.close(out_w)
            os.close(err_w)
        if word != "pid":
            os.close(out_r)
            os.close(err_r)
            if word:
                raise RuntimeError(f"the harness's fork server refused {cmd}: {word} {pid}")
            return None  # no command started: the server had stopped
        with _handle(int(pid)) as kill:
            try:
                outputs, finished = _read_all((out_r, err_r), timeout)
            except BaseException:  # as subprocess.run: an interrupted caller kills its command
                kill()
                raise
            if not finished:
                kill()
            word, _, status = answers.readline().decode().partition(" ")
    out, err = (_text(b) for b in outputs)
    if not finished:
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
    if word != "exit":
        raise RuntimeError(f"the harness's fork server lost {cmd} (pid {pid})")
    return subprocess.CompletedProcess(cmd, os.waitstatus_to_exitcode(int(status)), out, err)


@contextlib.contextmanager
def _handle(pid: int) -> Iterator[Callable[[], None]]:
    """A way to SIGKILL the command ``pid`` that cannot reach another process given its PID
    once the server has reaped it (a pidfd, taken while it runs)."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        pidfd = None  # ended and reaped already: nothing to kill

    def kill() -> None:
        if pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    try:
        yield kill
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _read_all(fds: tuple[int, ...], timeout: float) -> tuple[list[bytes], bool]:
    """Everything written to the pipes ``fds`` until each is closed (then closed here), and
    whether that came within ``timeout`` seconds."""
    chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in sel.select(left):
                data = os.read(int(key.fd), 1 << 16)
                if data:
                    chunks[int(key.fd)].append(data)
                else:
                    sel.unregister(key.fd)
        finished = not sel.get_map()
    for fd in fds:
        os.close(fd)
    return [b"".join(chunks[fd]) for fd in fds], finished


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` decodes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
