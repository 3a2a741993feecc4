"""The proxy served behind the HTTP front (``hetflow.front``: HAProxy on the port, the app
under uvicorn behind it): ``serve`` in the foreground for ``hetflow registry serve``,
``start_in_thread`` in the background for tests and the bench.

The front enforces the connection-level limits of ``settings.limits`` (a whole request
within ``request_timeout_s``, a client idle or not reading for ``client_idle_timeout_s`` cut,
``max_connections_per_client`` connections from one address in any state,
``max_requests_per_client`` with a request, ``max_connections`` requests at the app at once,
``max_body_bytes``) and answers its refusals as the proxy does, an OCI error body with the
API version header; the app never counts connections itself.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import httpx
from starlette.applications import Starlette

from hetflow.errors import UsageError
from hetflow.front import Answers, FrontLimits, Served, serve_app
from hetflow.front import listen_socket as front_socket
from hetflow.registry.errors import ErrorCode, error_body
from hetflow.registry.server.app import create_app
from hetflow.registry.server.gates import API_VERSION
from hetflow.registry.settings import Limits, Settings, parse_listen

__all__ = ["RunningProxy", "answers", "front_limits", "listen_socket", "serve", "start_in_thread"]

OCI_CODES = {
    400: ErrorCode.UNKNOWN,
    408: ErrorCode.UNKNOWN,
    413: ErrorCode.SIZE_INVALID,
    429: ErrorCode.TOOMANYREQUESTS,
    500: ErrorCode.UNKNOWN,
    502: ErrorCode.UNAVAILABLE,
    503: ErrorCode.UNAVAILABLE,
    504: ErrorCode.UNAVAILABLE,
}
# Slack past a fill's deadline: the app answers a fill that ran out itself (503), first.
FILL_SLACK_S = 60.0


def front_limits(limits: Limits) -> FrontLimits:
    """The front's share of the proxy's limits."""
    return FrontLimits(
        request_timeout_s=limits.request_timeout_s,
        idle_timeout_s=limits.client_idle_timeout_s,
        keepalive_timeout_s=limits.keepalive_timeout_s,
        max_requests_per_client=limits.max_requests_per_client,
        max_connections_per_client=limits.max_connections_per_client,
        max_connections=limits.max_connections,
        max_body_bytes=limits.max_body_bytes,
        # a cold blob sends nothing until its fill is done (verified first)
        app_timeout_s=limits.upstream_total_timeout_s + FILL_SLACK_S,
    )


def answers(limits: Limits) -> Answers:
    """The front's refusals as the proxy words its own: an OCI error naming the setting."""
    return Answers(
        body=lambda status, message: error_body(OCI_CODES[status], message).decode(),
        headers=((API_VERSION[0], API_VERSION[1]),),
        messages={
            408: f"the request (headers and body) did not arrive within {limits.request_timeout_s:g} s "
            "(limits.request_timeout_s)",
            413: f"request body over {limits.max_body_bytes} bytes (limits.max_body_bytes)",
            429: f"this client address has {limits.max_requests_per_client} requests open "
            "(limits.max_requests_per_client); finish some first",
            503: f"{limits.max_connections} requests are being served (limits.max_connections); try again",
        },
    )


def listen_socket(host: str, port: int) -> socket.socket:
    """The proxy's listening socket (``front.listen_socket`` in the proxy's words)."""
    return front_socket(host, port, named=f"--listen {host}:{port}", instead="another --listen", backlog=4096)


def serve(settings: Settings, *, log_level: str = "info") -> None:
    """Run the proxy on ``settings.listen`` until interrupted.  Refuses (UsageError) to
    run open to registration where that would reach beyond this machine."""
    if settings.needs_admin_token and settings.admin_token is None:
        raise UsageError(
            f"--listen {settings.listen}: the proxy would let anyone who can reach it register hardware and pull "
            "(with its upstream credentials, if any); set admin_token: in the config (or let "
            "`hetflow registry serve` make one)"
        )
    sock = listen_socket(*parse_listen(settings.listen))
    serve_app(
        create_app(settings),
        sock,
        limits=front_limits(settings.limits),
        answers=answers(settings.limits),
        workdir=settings.state_dir,
        log_level=log_level,
    )


@dataclass
class RunningProxy:
    """A proxy serving in the background (tests, the bench): the front on ``url``."""

    url: str  # http://127.0.0.1:PORT
    host: str  # 127.0.0.1:PORT, as image references through the proxy start
    app: Starlette
    served: Served

    @property
    def front_pid(self) -> int:
        """The front's process (HAProxy): its memory is the service's too."""
        assert self.served.front is not None
        return self.served.front.proc.pid

    def stop(self) -> None:
        self.served.stop()


def start_in_thread(
    settings: Settings, *, transport: httpx.MockTransport | None = None, log_level: str = "warning"
) -> RunningProxy:
    """Serve on a free loopback port (ignoring ``settings.listen``), behind the front as
    ``serve`` does; returns once a request went through.  The front ends when the calling
    thread does: call it from one that outlives the proxy (the main thread)."""
    app = create_app(settings, transport=transport)
    sock = listen_socket("127.0.0.1", 0)
    served = Served(
        app,
        sock,
        limits=front_limits(settings.limits),
        answers=answers(settings.limits),
        workdir=settings.state_dir,
        log_level=log_level,
        name="hetflow-proxy",
    )
    return RunningProxy(f"http://127.0.0.1:{served.port}", f"127.0.0.1:{served.port}", app, served)
