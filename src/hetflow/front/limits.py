"""What the front enforces before a request reaches a service's app, and how it words its
own refusals.

Each limit is the counterpart of a protection a hardened web server gives (the figures and
the choice are in docs/guides/images.md, "The HTTP front"):

    request_timeout_s         a whole request, headers and body, must arrive within it: a
                              header-read deadline and a minimum request rate in one (Go's
                              ReadHeaderTimeout / ReadTimeout, nginx's client_header_timeout,
                              Apache's mod_reqtimeout; HAProxy's ``timeout http-request``
                              with ``option http-buffer-request``)
    idle_timeout_s            a client that sends nothing, or takes nothing of its answer, this
                              long is cut (nginx's send_timeout; HAProxy's ``timeout client``)
    keepalive_timeout_s       an idle keep-alive connection between two requests
    max_requests_per_client   connections with a request from one address; 429 beyond
    max_connections_per_client  connections from one address in any state, those still
                              sending their headers too; closed at once beyond (nginx's
                              limit_conn counts only requests whose headers arrived)
    max_connections           requests passed to the app at once; beyond, a request waits
                              up to queue_timeout_s for a slot, then 503
    max_body_bytes            a request body; 413 beyond
    app_timeout_s             the app silent this long on one answer (a blob fetched from the
                              upstream before its first byte goes out): 504
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["Answers", "FrontLimits"]

KIB = 1024


@dataclass(frozen=True)
class FrontLimits:
    """The front's limits (see the module docstring); defaults suit a lab's proxy or dashboard."""

    request_timeout_s: float = 10.0
    idle_timeout_s: float = 30.0
    keepalive_timeout_s: float = 5.0
    max_requests_per_client: int = 64
    max_connections_per_client: int = 128
    max_connections: int = 1024
    max_body_bytes: int = 64 * KIB
    app_timeout_s: float = 3660.0
    queue_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("request_timeout_s", "idle_timeout_s", "keepalive_timeout_s", "app_timeout_s", "queue_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, not {getattr(self, name)}")
        for name in ("max_requests_per_client", "max_connections_per_client", "max_connections", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")


def _plain(status: int, message: str) -> str:
    import json

    return json.dumps({"error": message})


@dataclass(frozen=True)
class Answers:
    """How the front's own answers read, in the service's error format: ``body(status,
    message)`` is the JSON body, ``headers`` go on each of them (the registry's API version,
    the dashboard's hardening headers), ``messages`` replaces the default message of a status
    (to name the service's own setting)."""

    body: Callable[[int, str], str] = _plain
    headers: tuple[tuple[str, str], ...] = ()
    messages: Mapping[int, str] = field(default_factory=dict)
