"""An app served behind the front: ``Served`` (started in the background, for tests, the
bench and the services' own ``start_in_thread``) and ``serve_app`` (in the foreground until
SIGINT or SIGTERM, for ``hetflow registry serve`` and ``hetflow ui``)."""

from __future__ import annotations

import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path
from types import FrameType

from starlette.types import ASGIApp

from hetflow.errors import UsageError
from hetflow.front.backend import Backend
from hetflow.front.limits import Answers, FrontLimits
from hetflow.front.process import FrontProcess

__all__ = ["Served", "listen_socket", "serve_app"]


def listen_socket(host: str, port: int, *, named: str, instead: str, backlog: int) -> socket.socket:
    """A service's listening socket, bound here so that a taken port or a bad address is a
    clear error before the front starts on it; ``named`` is how the service's flag names the
    address, ``instead`` what to give in its place.  proto=IPPROTO_TCP, so that the front's
    accepted sockets are TCP ones."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise UsageError(f"{named}: not an address this machine can bind ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}; give {instead}") from None
    sock.listen(backlog)
    return sock


class Served:
    """``app`` on the listening socket ``listen`` (bound by the caller): uvicorn on a private
    Unix socket, HAProxy in front of it on ``listen``.  Returns once a request went through
    both; ``stop`` ends both and closes ``listen``.  Start it from a thread that lives as long
    as the service: the front is ended when that thread dies."""

    def __init__(
        self,
        app: ASGIApp,
        listen: socket.socket,
        *,
        limits: FrontLimits,
        answers: Answers,
        workdir: Path,
        log_level: str = "warning",
        name: str = "hetflow",
    ) -> None:
        self.listen = listen
        host, port = listen.getsockname()[:2]
        self.port: int = port
        self.host: str = host
        # Short (a Unix socket's path has 107 bytes at most) and private (0700).
        self.runtime = Path(tempfile.mkdtemp(prefix="hetflow-front-"))
        self.front: FrontProcess | None = None
        self.backend: Backend | None = None
        try:
            self.backend = Backend(app, self.runtime / "app.sock", log_level=log_level, name=f"{name}-{port}")
            self.backend.start()
            self.front = FrontProcess(listen, self.backend.path, limits, answers, runtime=self.runtime, workdir=workdir)
            self.front.wait_ready()
        except BaseException:
            self.stop()
            raise

    def failed(self) -> str | None:
        """Why the service stopped serving by itself (None while both parts run)."""
        if self.front is not None and not self.front.alive():
            return f"haproxy (the HTTP front) exited {self.front.proc.returncode}: {self.front.said()}"
        if self.backend is not None and not self.backend.thread.is_alive():
            return "the app's server (uvicorn) stopped"
        return None

    def stop(self) -> None:
        """The front first (no new requests; every client connection closes), then the app."""
        if self.front is not None:
            self.front.stop()
        self.listen.close()
        if self.backend is not None:
            self.backend.stop()
        shutil.rmtree(self.runtime, ignore_errors=True)


def serve_app(
    app: ASGIApp,
    listen: socket.socket,
    *,
    limits: FrontLimits,
    answers: Answers,
    workdir: Path,
    log_level: str = "warning",
) -> None:
    """Serve ``app`` behind the front until SIGINT or SIGTERM (from the main thread)."""
    stop = threading.Event()

    def asked(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, asked) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        served = Served(app, listen, limits=limits, answers=answers, workdir=workdir, log_level=log_level)
        try:
            while not stop.wait(0.5):
                why = served.failed()
                if why is not None:
                    raise UsageError(why)
        finally:
            served.stop()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
