"""Who may see the dashboard: its settings and the gate every request passes.

On a loopback address with no actions, nobody but this machine's users can connect, and
no token is asked (as Ray's and Jupyter's local dashboards); the Host header must then name
the loopback address, so a web page elsewhere cannot reach it through DNS rebinding.
Bound anywhere else, or with actions on, every path (the page, its files, the API and the
event streams) needs the token: ``Authorization: Bearer T``, or ``?token=T`` for what a
browser cannot give a header (the first page load, EventSource), compared in constant time.
An address that gave ``max_wrong_tokens`` wrong ones within a minute is answered 429 with
Retry-After, whatever it sends, until the oldest leaves the minute (``limits.WrongTokens``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hetflow.errors import UsageError
from hetflow.ui.limits import WrongTokens, client_address

LOOPBACK_NAMES = ("localhost",)
# The page runs only its own scripts (no inline script, no eval: share/ui/index.html loads
# static/boot.js); inline style attributes stay allowed because the page sets progress-bar
# widths and legend colours with them and the Gantt SVG carries a <style> element.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# On every answer, the gate's own refusals too: no framing (the action buttons cannot be
# clicked through another site's page), no MIME sniffing, no Referer (the page's URL may carry
# the token), no embedding by another origin (an <img src> on another local site's page cannot
# make the dashboard read a log: Cross-Origin-Resource-Policy), and the page's CSP.
HARDENING = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"content-security-policy", CSP.encode()),
]
# Sec-Fetch-Site values a browser sends for the dashboard's own page and for a URL typed or
# opened from a bookmark; cross-site and same-site (another origin on the same site, such as
# another port of 127.0.0.1) are refused before any work.  A client that sends no such header
# (curl, scripts) is not a browser led by another page, and passes.
FETCH_SITES_ALLOWED = (b"same-origin", b"none")
# The page's boot script holds no data and is the same for everyone; the page cannot pass the
# token on the <script src> that loads it (see index.html), so it is the one path without one.
PUBLIC_PATHS = ("/static/boot.js",)
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?$")
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
    max_streams: int = 64  # event streams open at once (runs' events and logs together); 503 beyond
    max_streams_per_client: int = 16  # of those, from one client address; 429 beyond
    max_wrong_tokens: int = 10  # wrong tokens one client address may give a minute; 429 beyond
    max_planning: int = 2  # plans computed at once (/api/plan, /api/pareto); 503 beyond

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


def parse_host(value: str) -> str | None:
    """The host of a Host header that names exactly one host[:port] (an IPv6 address in
    brackets, a port of digits), else None: ``127.0.0.1:8901, evil.com`` is refused, not cut."""
    m = _HOST.match(value)
    if m is None or (m["port"] is not None and int(m["port"]) > 65535):
        return None
    if m["v6"] is not None:
        try:
            ipaddress.IPv6Address(m["v6"])
        except ValueError:
            return None
        return f"[{m['v6']}]"
    return str(m["name"])


def _headers(scope: Scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope.get("headers", ()) if key == name]


def _refusal(scope: Scope, token: bytes | None) -> tuple[int, str] | None:
    """Why the gate refuses ``scope`` (status, message), or None to let it through."""
    hosts = _headers(scope, b"host")
    host = parse_host(hosts[0].decode("latin-1")) if len(hosts) == 1 else None
    if hosts and host is None:
        return 400, "the Host header must name exactly one host[:port] (an IPv6 address in brackets)"
    sites = _headers(scope, b"sec-fetch-site")
    if sites and any(site.strip().lower() not in FETCH_SITES_ALLOWED for site in sites):
        return 403, "a page on another site or origin may not use this dashboard (Sec-Fetch-Site)"
    if token is not None:
        if scope.get("path") in PUBLIC_PATHS and scope["type"] == "http":
            return None
        given = _token_of(scope)
        if given is None or not hmac.compare_digest(given.encode(), token):
            why = "a token is needed" if given is None else "the token is wrong"
            if given is None and _headers(scope, b"authorization"):
                why = "the Authorization header is not 'Bearer TOKEN'"
            return 401, f"{why}: open the URL hetflow ui printed (it ends in ?token=...)"
    elif not is_loopback(host or ""):
        return 421, "this dashboard answers only on its loopback address; open http://127.0.0.1:PORT/"
    return None


class Gate:
    """ASGI middleware: 401 without the right token (when one is needed), 421 for a Host
    that is not the loopback address on a token-less loopback dashboard."""

    def __init__(self, app: ASGIApp, config: UiConfig) -> None:
        self.app, self.config = app, config
        self._token = config.token.encode() if config.token else None
        self._wrong = WrongTokens(config.max_wrong_tokens)

    def _judged(self, scope: Scope) -> tuple[int, str, dict[str, str]] | None:
        """The refusal (status, message, headers) of ``scope``, wrong tokens counted per address."""
        address = client_address(scope.get("client"))
        wait = self._wrong.retry_after(address) if self._token is not None else None
        if wait is not None:
            return 429, f"too many wrong tokens from {address}; try again in {wait} s", {"retry-after": str(wait)}
        refusal = _refusal(scope, self._token)
        if refusal is None:
            return None
        if refusal[0] == 401 and _token_of(scope) is not None:
            self._wrong.failed(address)
        return refusal[0], refusal[1], {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the server's start and stop, not a client
            await self.app(scope, receive, send)
            return
        refusal = self._judged(scope)
        if refusal is not None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": refusal[1][:120]})  # 1008: policy violation
            return
        if refusal is not None:
            await _error(send, *refusal)
            return

        async def send_hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HARDENING]
            await send(message)

        await self.app(scope, receive, send_hardened)


async def _error(send: Send, status: int, message: str, extra: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *HARDENING]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="hetflow ui"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
