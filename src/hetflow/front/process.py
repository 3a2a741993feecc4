"""The front's process: HAProxy on the listening socket hetflow bound (inherited by its
number, ``bind fd@N``), configured by ``haproxy.render``, ended with its service.

hetflow binds the socket itself, so a taken port or a bad address is hetflow's clear error
before anything starts, and ``--port 0`` works.  HAProxy runs in the foreground (``-db``)
in a session of its own, so a terminal's Ctrl-C reaches hetflow only, which stops it in
order; and it gets SIGTERM when the thread that started it dies (``PR_SET_PDEATHSIG``), so
a hetflow killed with SIGKILL leaves no HAProxy behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from hetflow.errors import UsageError
from hetflow.front.haproxy import render
from hetflow.front.limits import Answers, FrontLimits

__all__ = ["FrontProcess", "find_haproxy", "front_maxconn"]

SBIN = ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy")  # not on a user's PATH on Debian
PR_SET_PDEATHSIG = 1  # prctl(2)
_libc = ctypes.CDLL(None, use_errno=True)


def find_haproxy() -> str:
    """The haproxy executable, or a UsageError saying how to install it."""
    found = shutil.which("haproxy") or next((p for p in SBIN if os.access(p, os.X_OK)), None)
    if found is None:
        raise UsageError(
            "haproxy is not installed: hetflow's registry proxy and dashboard run behind it "
            "(apt-get install haproxy; `make deps` installs it)"
        )
    return found


def front_maxconn(limits: FrontLimits) -> int:
    """Connections the front holds at most in all, every state: four times what may reach the
    app, 8192 at least, within the file limit (two descriptors a connection: the client's and
    the app's; HAProxy refuses to start when it cannot raise its own limit that far)."""
    want = max(8192, 4 * limits.max_connections)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return want
    return max(256, min(want, (hard - 1024) // 2))


def _die_with_parent(parent: int) -> Callable[[], None]:
    def hook() -> None:  # in the child, between fork and exec
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


def _loopback(address: tuple[str, int]) -> tuple[str, int]:
    host, port = address[0], address[1]
    return ({"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host), port)


class FrontProcess:
    """HAProxy in front of the app listening on ``app_socket``; its files go in ``runtime``
    (private), it runs in ``workdir``.  ``wait_ready`` returns once an answer came through."""

    def __init__(
        self,
        listen: socket.socket,
        app_socket: Path,
        limits: FrontLimits,
        answers: Answers,
        *,
        runtime: Path,
        workdir: Path,
    ) -> None:
        self.listen = listen
        self.config = runtime / "haproxy.cfg"
        self.log = runtime / "haproxy.log"
        fd = listen.fileno()
        text = render(limits, answers, listen_fd=fd, app_socket=app_socket, maxconn=front_maxconn(limits))
        self.config.write_text(text)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [find_haproxy(), "-db", "-f", str(self.config)],
                pass_fds=(fd,),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),  # it takes no lock: safe after fork
            )

    def said(self) -> str:
        """The tail of what HAProxy printed (its alerts when it would not start)."""
        try:
            return self.log.read_text(errors="replace").strip()[-2000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until one request went through the front to the app and back (any HTTP answer)."""
        address = _loopback(self.listen.getsockname())
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise UsageError(f"haproxy (the HTTP front) exited {self.proc.returncode}: {self.said()}")
            with contextlib.suppress(OSError), socket.create_connection(address, timeout=2) as probe:
                probe.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                if probe.recv(16).startswith(b"HTTP/1."):
                    return
            if time.monotonic() > deadline:
                raise UsageError(f"the HTTP front did not answer on {address[0]}:{address[1]} in {timeout:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()  # HAProxy: SIGTERM stops at once, closing every connection
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
