"""Who may see the dashboard: its settings and the gate every request passes.

On a loopback address with no actions, nobody but this machine's users can connect, and
no token is asked (as Ray's and Jupyter's local dashboards); the Host header must then name
the loopback address, so a web page elsewhere cannot reach it through DNS rebinding.
Bound anywhere else, or with actions on, every path (the page, its files, the API and the
event streams) needs the token: ``Authorization: Bearer T``, or ``?token=T`` for what a
browser cannot give a header (the first page load, EventSource), compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hetflow.errors import UsageError

LOOPBACK_NAMES = ("localhost",)
# On every answer: no framing (the action buttons cannot be clicked through another site's
# page), no MIME sniffing, and no Referer (the page's URL may carry the token).
HARDENING = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
MIN_TOKEN = 16


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)  # 32 characters


@dataclass(frozen=True)
class UiConfig:
    """What ``hetflow ui`` was started with."""

    store_path: Path
    host: str = "127.0.0.1"
    port: int = 8786
    token: str | None = None  # required on every request when set
    actions: bool = False  # stop, resume, retry: POST endpoints
    show_env: bool = False  # show steps' env values (else names only)
    root: Path = Path(".")  # the plans view reads workflow / cluster / catalog files under it

    @property
    def needs_token(self) -> bool:
        return self.actions or not is_loopback(self.host)

    def checked(self) -> UiConfig:
        """The config with a token where one is needed (generated when none was given);
        a given token must be long enough to resist guessing."""
        if self.token is not None and len(self.token) < MIN_TOKEN:
            raise UsageError(f"--token: give at least {MIN_TOKEN} characters (or leave it out to have one made)")
        if self.needs_token and self.token is None:
            return UiConfig(**{**self.__dict__, "token": new_token()})
        return self

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "[::]") else host
        return f"http://{shown}:{self.port}/" + (f"?token={self.token}" if self.token else "")


def _token_of(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            kind, _, cred = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer":
                return str(cred.strip())
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    given = query.get("token")
    return given[0] if given else None


def _host_of(scope: Scope) -> str:
    for key, value in scope.get("headers", ()):
        if key == b"host":
            host = str(value.decode("latin-1"))
            return host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return ""


class Gate:
    """ASGI middleware: 401 without the right token (when one is needed), 421 for a Host
    that is not the loopback address on a token-less loopback dashboard."""

    def __init__(self, app: ASGIApp, config: UiConfig) -> None:
        self.app, self.config = app, config
        self._token = config.token.encode() if config.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._token is not None:
            given = _token_of(scope)
            if given is None or not hmac.compare_digest(given.encode(), self._token):
                why = "a token is needed" if given is None else "the token is wrong"
                await _error(send, 401, f"{why}: open the URL hetflow ui printed (it ends in ?token=...)")
                return
        elif not is_loopback(_host_of(scope)):
            await _error(send, 421, "this dashboard answers only on its loopback address; open http://127.0.0.1:PORT/")
            return

        async def send_hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HARDENING]
            await send(message)

        await self.app(scope, receive, send_hardened)


async def _error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="hetflow ui"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
