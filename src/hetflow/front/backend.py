"""The app behind the front: uvicorn on a Unix socket in a private folder, served from a
daemon thread.  Only the front can connect (the folder is 0700), so the addresses it sends
(``FrontAddresses``) are the client's: the app sees the scope's ``client`` and ``server`` as
it would on the port itself, ports included (the registry finds a local client's user by
both ends of its connection, ``registry.server.peers``)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from hetflow.front.haproxy import CLIENT_HEADER, SERVER_HEADER

__all__ = ["Backend", "FrontAddresses"]

# Longer than HAProxy keeps an idle connection to the app in its pool (pool-purge-delay,
# 5 s): the front, not the app, closes an idle one, so a request never meets a closing
# connection (a 502).
KEEP_ALIVE_S = 75
GRACE_S = 5  # stopping: what is still being answered gets this long


def _address(value: bytes) -> tuple[str, int] | None:
    host, _, port = value.decode("latin-1").rpartition(" ")
    return (host, int(port)) if host and port.isdigit() else None


class FrontAddresses:
    """Puts the front's word for both ends of the client's connection in the scope (``client``
    and ``server``, where the app reads them) and drops those headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.names = (CLIENT_HEADER.lower().encode(), SERVER_HEADER.lower().encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = dict(scope)
            kept = []
            for name, value in scope["headers"]:
                if name == self.names[0]:
                    scope["client"] = _address(value)
                elif name == self.names[1]:
                    scope["server"] = _address(value)
                else:
                    kept.append((name, value))
            scope["headers"] = kept
        await self.app(scope, receive, send)


class Backend:
    """``app`` under uvicorn on ``path`` (a Unix socket made here), started by ``start``."""

    def __init__(self, app: ASGIApp, path: Path, *, log_level: str, name: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o600)
        self.sock.listen(4096)  # the front's connections wait here until uvicorn accepts them
        config = uvicorn.Config(
            FrontAddresses(app),
            log_level=log_level,
            access_log=False,
            lifespan="on",
            proxy_headers=False,  # the front's own headers say who the client is
            server_header=False,
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=GRACE_S,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True, name=name)

    def start(self, timeout: float = 30.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the app did not start on {self.path}")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=GRACE_S + 5)
        self.sock.close()
