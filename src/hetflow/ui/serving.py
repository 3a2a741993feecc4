"""``hetflow ui`` served behind the HTTP front (``hetflow.front``: HAProxy on the port, the
dashboard under uvicorn behind it), on the socket ``app.bind`` made (bound first, so a taken
port is a clear error).

The front cuts a client whose request (headers and body) is not in within 10 s, one idle or
not reading for 30 s, and limits each client address (64 connections with a request, 128 in
all, those still sending headers too); its own answers are the dashboard's JSON errors with
the hardening headers every answer carries (``auth.HARDENING``)."""

from __future__ import annotations

import socket

from hetflow.front import Answers, FrontLimits, serve_app
from hetflow.ui.app import bind, create_app
from hetflow.ui.auth import HARDENING, UiConfig

__all__ = ["ANSWERS", "LIMITS", "serve"]

# The dashboard takes no request body (its actions carry none); its slowest answer is a
# Pareto front of a large catalog, computed while the client waits.
LIMITS = FrontLimits(max_body_bytes=4096, app_timeout_s=900.0)
ANSWERS = Answers(headers=tuple((name.decode(), value.decode()) for name, value in HARDENING))


def serve(config: UiConfig, *, log_level: str = "warning", sock: socket.socket | None = None) -> None:
    """Serve the dashboard until interrupted, on ``sock`` or on ``config.host:config.port``."""
    app = create_app(config)
    sock = sock or bind(config.host, config.port)
    serve_app(app, sock, limits=LIMITS, answers=ANSWERS, workdir=config.store_path.parent, log_level=log_level)
