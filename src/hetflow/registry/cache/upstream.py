"""The proxy's side of the upstream registry: httpx, streaming, upstream auth.

``hetflow.images.distribution.client.RegistryClient`` is the synchronous client for tools; the
proxy needs the upstream's own status and error body and streamed blobs, so it has
this small one.  Everything is read with httpx's async client on the event loop: a blob
GET (``open_blob``) holds no thread while the upstream is slow (issue 38: with the sync
client in worker threads, fills of a trickling upstream held every thread).  Blobs have
a client of their own, so fills never wait for a connection that manifests need; the
fetcher bounds how many run (``limits.max_fills``).

``transport`` is the seam: tests pass an ``httpx.MockTransport`` (it serves both
clients), the proxy the default network transports.

If the upstream asks for credentials (401), the configured user and password are
sent as Basic, or traded for a bearer at the realm the upstream names (Docker token
authentication, the same flow the proxy offers its own clients).  The Authorization
that worked is kept per scope, for both clients, until the upstream refuses it.  The
credentials go only to a realm on the upstream's own host or one of ``token_hosts`` (and
over https when the upstream is https): a challenge naming any other is refused.

Redirects: blob GETs follow them to the upstream's host, one of ``redirect_hosts``, or
any other host whose every address is public (S3-backed registries send blobs from another
host, such as a CDN; the bytes are checked against their digest before anyone gets them):
never to a loopback, private, link-local or otherwise non-global address, so an upstream
cannot point the proxy at a service inside its network (server-side request forgery).
Manifest and tag-list requests follow them only to the upstream's own host or one of
``redirect_hosts``, and never carry the upstream credentials off the upstream's host.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

import httpx

from hetflow.images import Challenge, RegistryError, parse_challenge

__all__ = ["Upstream", "UpstreamUnavailable"]

_MAX_REDIRECTS = 5


class UpstreamUnavailable(RegistryError):
    """The upstream could not be reached, or its token service failed."""


class Upstream:
    """Requests to one upstream registry."""

    def __init__(
        self,
        base_url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        transport: httpx.MockTransport | None = None,
        timeout: float = 60.0,
        idle_timeout_s: float | None = None,
        redirect_hosts: tuple[str, ...] = (),
        token_hosts: tuple[str, ...] = (),
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token_hosts = {urlsplit(self.base_url).hostname or "", *(h.lower() for h in token_hosts)}
        self._hosts = {urlsplit(self.base_url).netloc.lower(), *(h.lower() for h in redirect_hosts)}
        # httpx's read timeout is the idle one: the longest wait for the next bytes.
        timeout = idle_timeout_s or timeout
        self._basic = httpx.BasicAuth(username, password or "") if username else None
        common = {
            "base_url": self.base_url,
            "timeout": httpx.Timeout(timeout, connect=10.0),
            "limits": httpx.Limits(max_connections=64, max_keepalive_connections=32),
            "follow_redirects": True,  # S3-backed registries redirect blob GETs
        }
        self._client = httpx.AsyncClient(transport=transport, **{**common, "follow_redirects": False})  # type: ignore[arg-type]
        self._blobs = httpx.AsyncClient(
            transport=transport,
            event_hooks={"request": [self._public_or_allowed]},  # every hop of a redirected blob GET
            **{**common, "limits": httpx.Limits(max_connections=None, max_keepalive_connections=32)},  # type: ignore[arg-type]
        )
        self._auth: dict[str, str] = {}  # scope -> Authorization header that worked

    async def aclose(self) -> None:
        await self._client.aclose()
        await self._blobs.aclose()

    @staticmethod
    def _scope(repo: str | None) -> str:
        return f"repository:{repo}:pull" if repo else ""

    def _headers(self, scope: str, headers: dict[str, str] | None) -> dict[str, str]:
        sent = dict(headers or {})
        if scope in self._auth:
            sent["Authorization"] = self._auth[scope]
        return sent

    async def request(
        self, method: str, path: str, *, repo: str | None = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Send a request and return the response with its body unread (stream it or
        ``aread`` it; always ``aclose`` it).  Raises ``UpstreamUnavailable``."""
        scope = self._scope(repo)
        response = await self._send(method, path, self._headers(scope, headers))
        if response.status_code != 401 or self._basic is None:
            return response
        await response.aclose()
        await self._negotiate(response, scope)
        return await self._send(method, path, self._headers(scope, headers))

    async def open_blob(self, repo: str, digest: str, *, start: int = 0) -> httpx.Response:
        """``GET /v2/<repo>/blobs/<digest>`` (from byte ``start``: ``Range: bytes=start-``);
        returns once the headers are in, its body unread (``aiter_bytes``; ``aclose`` it).
        Raises ``UpstreamUnavailable``."""
        scope = self._scope(repo)
        path = f"/v2/{repo}/blobs/{digest}"
        headers = {"Accept-Encoding": "identity"}  # the digest is over the bytes as stored
        if start:
            headers["Range"] = f"bytes={start}-"
        response = await self._send_blob(path, self._headers(scope, headers))
        if response.status_code != 401 or self._basic is None:
            return response
        await response.aclose()
        await self._negotiate(response, scope)
        return await self._send_blob(path, self._headers(scope, headers))

    async def _public_or_allowed(self, request: httpx.Request) -> None:
        """A blob GET (or a hop of its redirects) may go to the upstream, ``redirect_hosts``,
        or a host all of whose addresses are global (``ipaddress.is_global``: RFC 6890)."""
        if request.url.netloc.decode().lower() in self._hosts:
            return
        host = request.url.host
        try:
            found = await asyncio.get_running_loop().getaddrinfo(host, request.url.port or 443, type=socket.SOCK_STREAM)
        except OSError as err:
            raise UpstreamUnavailable(
                f"upstream {self.base_url} sent a blob request to {host}, which does not resolve: {err}"
            ) from None
        inside = sorted({str(info[4][0]) for info in found if not ipaddress.ip_address(info[4][0]).is_global})
        if inside:
            raise UpstreamUnavailable(
                f"upstream {self.base_url} redirected a blob request to {request.url.copy_with(query=None)}, "
                f"an address inside this network ({', '.join(inside)}); the proxy does not fetch from there "
                "(add the host to redirect_hosts: in the proxy's config if it is meant)"
            )

    async def _send_blob(self, path: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return await self._blobs.send(self._blobs.build_request("GET", path, headers=headers), stream=True)
        except httpx.HTTPError as err:
            raise UpstreamUnavailable(f"upstream {self.base_url} did not answer GET {path}: {err!r}") from err

    async def _send(self, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        request = self._client.build_request(method, path, headers=headers)
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                response = await self._client.send(request, stream=True)
                if not response.is_redirect:
                    return response
                await response.aclose()
                target = response.next_request
                if target is None or target.url.netloc.decode().lower() not in self._hosts:
                    where = target.url if target is not None else response.headers.get("location")
                    raise UpstreamUnavailable(
                        f"upstream {self.base_url} redirected {method} {path} to {where}, not the upstream's host "
                        "(add the host to redirect_hosts: in the proxy's config to allow it)"
                    )
                if target.url.netloc != request.url.netloc:
                    target.headers.pop("Authorization", None)
                request = target
        except httpx.HTTPError as err:
            raise UpstreamUnavailable(f"upstream {self.base_url} did not answer {method} {path}: {err!r}") from err
        raise UpstreamUnavailable(f"upstream {self.base_url}: more than {_MAX_REDIRECTS} redirects for {path}")

    async def _negotiate(self, refused: httpx.Response, scope: str) -> None:
        """Work out the Authorization for ``scope`` from the upstream's 401 challenge."""
        challenge = parse_challenge(refused.headers.get("www-authenticate", ""))
        if challenge is not None and challenge.scheme == "bearer":
            self._auth[scope] = await self._fetch_bearer(challenge, scope)
        else:
            self._auth[scope] = self._basic_header()

    def _basic_header(self) -> str:
        assert self._basic is not None
        request = httpx.Request("GET", self.base_url)
        return str(next(self._basic.auth_flow(request)).headers["Authorization"])

    def _check_realm(self, realm: str) -> None:
        """The upstream's credentials go to its own host's token service or one of
        ``token_hosts`` (a name, or NAME:PORT), over https when the upstream is https."""
        parts = urlsplit(realm)
        host = (parts.hostname or "").lower()
        if host not in self._token_hosts and parts.netloc.lower() not in self._token_hosts:
            raise UpstreamUnavailable(
                f"upstream {self.base_url} asks for a bearer from {realm}, a token service on {host or 'no host'}, "
                "not the upstream's host; the proxy sends its upstream credentials to no other host "
                "(add the host to upstream_token_hosts: in the proxy's config if it is the upstream's)"
            )
        if parts.scheme != "https" and self.base_url.startswith("https://"):
            raise UpstreamUnavailable(
                f"upstream {self.base_url} asks for a bearer from {realm} over plain HTTP; the proxy sends "
                "its upstream credentials to an https upstream's token service only over https"
            )

    async def _fetch_bearer(self, challenge: Challenge, scope: str) -> str:
        realm = challenge.params.get("realm")
        if not realm:
            raise UpstreamUnavailable(f"upstream {self.base_url} asked for a bearer but named no realm")
        self._check_realm(realm)
        params = {"service": challenge.params.get("service", "")}
        if challenge.params.get("scope") or scope:
            params["scope"] = challenge.params.get("scope") or scope
        try:
            response = await self._client.get(realm, params=params, headers={"Authorization": self._basic_header()})
        except httpx.HTTPError as err:
            raise UpstreamUnavailable(f"upstream token service {realm} did not answer: {err!r}") from err
        if response.status_code != 200:
            raise UpstreamUnavailable(f"upstream token service {realm} answered {response.status_code}")
        data = response.json()
        token = data.get("token") or data.get("access_token")
        if not isinstance(token, str) or not token.strip():
            raise UpstreamUnavailable(f"upstream token service {realm} returned no token")
        return f"Bearer {token}"
