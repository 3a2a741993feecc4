"""The front's configuration for HAProxy (Debian's ``haproxy``), a pure function of the
limits: ``render(limits, answers, listen_fd=, app_socket=, maxconn=)``.

Why each line is there (HAProxy 2.6 configuration manual, sections named):

* ``option http-buffer-request`` with ``timeout http-request``: a request's headers *and*
  body must arrive within ``request_timeout_s`` (4.2: "the whole request, body included,
  is waited for"), so a slow-header or slow-body client is cut at the deadline; the buffer
  (``tune.bufsize``) holds the largest body the service takes, so the deadline covers it whole.
* ``timeout client``: a client silent, or not reading its answer, for ``idle_timeout_s``.
* ``tcp-request connection track-sc0 src`` and a ``conn_cur`` stick table: every connection
  from an address is counted from its accept, those still sending headers too; past
  ``max_connections_per_client`` a new one is closed at once, past ``max_requests_per_client``
  a request is answered 429.
* ``nbthread 1``: connections are counted in the order they came; with a thread per core a
  connection accepted on one thread could be counted after a later one's request was read
  (seen on a loaded machine: a 17th request let through past a limit of 16).  One thread
  serves far more than the app behind it (``python -m bench.proxy.registry``'s wrk rows).
* ``option abortonclose``: a client that goes away ends its request at the app at once (an
  event stream's slot is freed when its reader leaves, not at its next write).
* ``server ... maxconn``: at most ``max_connections`` requests reach the app at once; the
  rest queue (``timeout queue``), then 503.
* The answers the front makes itself (``http-request return``, ``http-error``) are the
  service's JSON errors with its headers, never HAProxy's HTML.
* No ``log`` line: a timed-out or refused client (or podman's TLS probe, a 400) is not a
  fault of the service, and nothing about it is written.
"""

from __future__ import annotations

import json
from pathlib import Path

from hetflow.front.limits import Answers, FrontLimits

__all__ = ["CLIENT_HEADER", "DEFAULT_MESSAGES", "SERVER_HEADER", "bufsize", "render"]

CLIENT_HEADER = "X-Hetflow-Client"  # "ADDRESS PORT" of the client, as the front saw it
SERVER_HEADER = "X-Hetflow-Server"  # "ADDRESS PORT" the client connected to

DEFAULT_MESSAGES = {
    400: "the request is not valid HTTP/1.1",
    408: "the request (its headers and body) did not arrive within {request_timeout_s:g} s; send it whole",
    413: "the request body is over {max_body_bytes} bytes",
    429: "this client address has {max_requests_per_client} connections open; finish some first",
    500: "the front failed on this request",
    502: "the service behind the front gave no valid answer",
    503: "{max_connections} requests are being served and no slot came free within {queue_timeout_s:g} s; try again",
    504: "the service did not answer within {app_timeout_s:g} s",
}
# HAProxy's http-error takes these codes (2.6 manual, "http-error").
ERROR_CODES = (400, 408, 500, 502, 503, 504)
RETRY_AFTER = {429: "2", 503: "2"}


def _time(seconds: float) -> str:
    """A HAProxy time: whole seconds as ``10s``, else milliseconds (it takes no fractions)."""
    return f"{seconds:g}s" if float(seconds).is_integer() else f"{max(1, round(seconds * 1000))}ms"


def bufsize(limits: FrontLimits) -> int:
    """HAProxy's buffer: the largest body the service takes and room for its headers (16 KiB,
    HAProxy's default buffer), so ``http-buffer-request`` waits for every body whole."""
    return max(16384, (limits.max_body_bytes + 16384 + 1023) // 1024 * 1024)


def _quoted(text: str) -> str:
    """``text`` in double quotes, as HAProxy's parser reads them back (2.2 "Quoting and
    escaping": backslash escapes; ``$`` would name an environment variable)."""
    if "%" in text:  # a header value is a log-format string: '%' would start a fetch
        raise ValueError(f"a front header value may not hold '%': {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _answer(status: int, limits: FrontLimits, answers: Answers) -> str:
    """``status content-type ... string '<json>' hdr ...`` for ``return`` and ``http-error``."""
    message = answers.messages.get(status) or DEFAULT_MESSAGES[status].format(**limits.__dict__)
    # Single quotes keep every character as it is (no escapes, no variables); the one
    # character they cannot hold is written as JSON's own escape for it.
    body = answers.body(status, message).replace("'", "\\u0027")
    json.loads(body)  # the service's format must be JSON: fail here, not in a client
    headers = [*answers.headers, *((("Retry-After", RETRY_AFTER[status]),) if status in RETRY_AFTER else ())]
    hdrs = "".join(f" hdr {name} {_quoted(value)}" for name, value in headers)
    return f"status {status} content-type application/json string '{body}'{hdrs}"


def render(limits: FrontLimits, answers: Answers, *, listen_fd: int, app_socket: Path, maxconn: int) -> str:
    """The whole configuration: listen on the inherited socket ``listen_fd``, pass requests to
    the app on the Unix socket ``app_socket``; ``maxconn`` connections at most in all."""
    most = limits.max_body_bytes
    too_big = f"{{ req.hdr_val(content-length) gt {most} }} || {{ req.body_size gt {most} }}"
    lines = [
        "global",
        "    nbthread 1",
        f"    maxconn {maxconn}",
        f"    tune.bufsize {bufsize(limits)}",
        "defaults",
        "    mode http",
        "    option http-buffer-request",
        "    option abortonclose",
        f"    timeout http-request {_time(limits.request_timeout_s)}",
        f"    timeout client {_time(limits.idle_timeout_s)}",
        f"    timeout http-keep-alive {_time(limits.keepalive_timeout_s)}",
        "    timeout connect 5s",
        f"    timeout server {_time(limits.app_timeout_s)}",
        f"    timeout queue {_time(limits.queue_timeout_s)}",
        "frontend service",
        f"    bind fd@{listen_fd}",
        f"    maxconn {maxconn}",
        "    stick-table type ipv6 size 1m expire 60s store conn_cur",
        "    tcp-request connection track-sc0 src",
        f"    tcp-request connection reject if {{ sc0_conn_cur gt {limits.max_connections_per_client} }}",
        f"    http-request return {_answer(429, limits, answers)} "
        f"if {{ sc0_conn_cur gt {limits.max_requests_per_client} }}",
        f"    http-request return {_answer(413, limits, answers)} if {too_big}",
        # Both ends of the client's connection, for the app's scope (backend.FrontAddresses):
        # set here, over whatever a client sent under these names.
        f'    http-request set-header {CLIENT_HEADER} "%[src] %[src_port]"',
        f'    http-request set-header {SERVER_HEADER} "%[dst] %[dst_port]"',
        *(f"    http-error {_answer(code, limits, answers)}" for code in ERROR_CODES),
        "    default_backend app",
        "backend app",
        "    http-reuse safe",
        f"    server app unix@{app_socket} maxconn {limits.max_connections}",
    ]
    return "\n".join(lines) + "\n"
