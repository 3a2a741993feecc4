"""``hetflow tes serve``: the API behind the HTTP front (``hetflow.front``: HAProxy on the
port, the app under uvicorn on a private Unix socket), as the registry proxy and the
dashboard are served; ``start_in_thread`` for tests and the bench."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from hetflow import __version__
from hetflow.errors import UsageError
from hetflow.front import Answers, FrontLimits, Served, listen_socket, serve_app
from hetflow.tes.http.app import create_app
from hetflow.tes.service import TesService

DEFAULT_LISTEN = "127.0.0.1:8000"
# A task document is small, but a task may carry its inputs as ``content``: 8 MiB.
LIMITS = FrontLimits(max_body_bytes=8 << 20, app_timeout_s=120.0)


def _body(status: int, message: str) -> str:
    return json.dumps({"msg": message, "status_code": status})


ANSWERS = Answers(body=_body)


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:8000"`` -> ``("127.0.0.1", 8000)``; ``"[::1]:8000"`` works too."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--listen {listen!r}: write HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    return listen_socket(host, port, named=f"--listen {listen}", instead="another --listen HOST:PORT", backlog=4096)


def serve(service: TesService, listen: str, *, workdir: Path, log_level: str = "warning") -> None:
    """Serve until SIGINT or SIGTERM; the scheduler runs meanwhile."""
    sock = bind(listen)
    service.start()
    try:
        app = create_app(service, version=__version__)
        serve_app(app, sock, limits=LIMITS, answers=ANSWERS, workdir=workdir, log_level=log_level)
    finally:
        service.stop()


def start_in_thread(service: TesService, listen: str, *, workdir: Path) -> Served:
    """The service started and served in the background; ``stop()`` the result, then the service."""
    sock = bind(listen)
    service.start()
    app = create_app(service, version=__version__)
    return Served(app, sock, limits=LIMITS, answers=ANSWERS, workdir=workdir, name="tes")
