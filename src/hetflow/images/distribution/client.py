"""A small client for the OCI distribution API (distribution-spec v1.1, "/v2/").

It reads and writes manifests, blobs and tag lists, and authenticates the way docker
and podman do: a request answered ``401`` with ``WWW-Authenticate: Bearer realm=...,
service=..., scope=...`` is retried with a token fetched from the realm (with Basic
credentials when given; distribution's docs/spec/auth/token.md), and a ``Basic``
challenge is answered with the user name and password.  Tokens are cached per scope.

Every manifest and blob is checked against its digest (the one asked for, or the
``Docker-Content-Digest`` the registry sent); a mismatch is ``DigestMismatchError``.

The I/O seam is httpx's transport: pass ``transport=httpx.MockTransport(handler)``
to test without a network.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from hetflow.images.errors import AuthError, DigestMismatchError, NotFoundError, RegistryError
from hetflow.images.oci import (
    ACCEPT_ANY_MANIFEST,
    DIGEST_ALGORITHMS,
    Descriptor,
    digest_of,
    is_index,
    is_manifest,
    sniff_media_type,
    verify_digest,
)

__all__ = ["Challenge", "RegistryClient", "parse_challenge", "verify_digest"]

_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)=(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))')
_NOT_FOUND_CODES = {"NAME_UNKNOWN", "MANIFEST_UNKNOWN", "BLOB_UNKNOWN", "NOT_FOUND"}
# distribution refuses manifests over 4 MiB, as hetflow's proxy does; a registry that
# sends more (issue 23: an endless one ran `hetflow images inspect` out of memory at
# 3 GB) is refused at the limit.  Error bodies are read up to 64 KiB.
MANIFEST_LIMIT = 4 * 1024 * 1024
ERROR_LIMIT = 64 * 1024
_MANIFEST_OVER = "for a manifest; refused (distribution's limit is 4 MiB)"


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header (RFC 7235): scheme and its parameters."""

    scheme: str  # lower case: "bearer" or "basic"
    params: dict[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """``Bearer realm="https://auth",service="reg",scope="repository:a:pull"`` -> Challenge."""
    header = header.strip()
    if not header:
        return None
    scheme, _, rest = header.partition(" ")
    params = {m[1].lower(): (m[2] if m[2] is not None else m[3]) for m in _PARAM.finditer(rest)}
    return Challenge(scheme.lower(), {k: v.replace('\\"', '"') for k, v in params.items()})


def _basic_header(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def _is_digest(ref: str) -> bool:
    return ":" in ref and ref.split(":", 1)[0] in DIGEST_ALGORITHMS


def _errors(response: httpx.Response) -> list[dict[str, Any]]:
    """The distribution-spec error list ``{"errors": [{"code", "message", "detail"}]}``."""
    try:
        data = json.loads(response.content)
    except ValueError:
        return []
    errors = data.get("errors") if isinstance(data, dict) else None
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []


class RegistryClient:
    """The distribution API of one registry.  ``base_url`` is its root (``https://host``);
    give ``username``/``password`` for Basic auth or to fetch Bearer tokens, or a ready
    ``token``.  Use as a context manager, or call ``close``."""

    def __init__(
        self,
        base_url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        verify: bool = True,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._username = username
        self._password = password
        self._fixed_token = token
        self._tokens: dict[str, str] = {}  # scope -> bearer token
        self._basic = False  # the registry asked for Basic auth once: send it up front
        self._http = httpx.Client(
            transport=transport,
            verify=verify,
            timeout=timeout,
            follow_redirects=True,  # blobs are often served by a redirect to storage
            headers={"User-Agent": "hetflow"},
        )

    # --- plumbing ----------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _auth_headers(self, scope: str) -> dict[str, str]:
        token = self._fixed_token or self._tokens.get(scope)
        if token:
            return {"Authorization": f"Bearer {token}"}
        if self._basic and self._username is not None:
            return {"Authorization": _basic_header(self._username, self._password or "")}
        return {}

    def _who(self) -> str:
        return f"user {self._username!r}" if self._username else "anonymous access"

    def _transport_error(self, url: str, exc: httpx.TransportError) -> RegistryError:
        return RegistryError(
            f"cannot reach the registry at {url}: {exc}. Is it running and is the address right? "
            "A registry without TLS on loopback needs --insecure (plain http).",
            url=url,
        )

    def _send(
        self,
        method: str,
        url: str,
        *,
        scope: str,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
        limit: int | None = None,
        over: str = _MANIFEST_OVER,
    ) -> httpx.Response:
        """Send one request, answering an auth challenge once; raises AuthError when the
        retry is refused too, RegistryError when the registry cannot be reached.  With
        ``limit``, a body over ``limit`` bytes is a RegistryError (``over`` says what it
        was for), read no further."""
        if url.startswith("/"):
            url = self.base_url + url

        def go() -> httpx.Response:
            try:
                sent = {**(headers or {}), **self._auth_headers(scope)}
                if limit is None:
                    return self._http.request(method, url, headers=sent, content=content)
                request = self._http.build_request(method, url, headers=sent, content=content)
                streamed = self._http.send(request, stream=True)
                try:
                    body = self._read_capped(streamed, limit if streamed.status_code == 200 else ERROR_LIMIT, url, over)
                finally:
                    streamed.close()
                return httpx.Response(streamed.status_code, headers=streamed.headers, content=body, request=request)
            except httpx.TransportError as exc:
                raise self._transport_error(url, exc) from exc

        response = go()
        if response.status_code != 401:
            return response
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is not None and challenge.scheme == "bearer":
            if self._fixed_token:
                raise AuthError(
                    f"{self.base_url} refused the bearer token for {method} {httpx.URL(url).path}: "
                    "it is expired, for another scope, or wrong; get a new token",
                    status=401,
                    url=url,
                )
            self._tokens[scope] = self._fetch_token(challenge, scope)
        elif challenge is not None and challenge.scheme == "basic":
            if self._username is None:
                raise AuthError(
                    f"{self.base_url} asks for a user name and password (Basic auth); pass username and password",
                    status=401,
                    url=url,
                )
            if self._basic:  # they were sent already and refused
                raise self._refused(url, response)
            self._basic = True
        else:
            raise AuthError(
                f"{self.base_url} answered 401 with no usable WWW-Authenticate challenge "
                f"({response.headers.get('WWW-Authenticate', 'none')!r}); hetflow speaks Bearer and Basic",
                status=401,
                url=url,
            )
        response = go()
        if response.status_code == 401:
            raise self._refused(url, response)
        return response

    @staticmethod
    def _read_capped(response: httpx.Response, limit: int, url: str, over: str) -> bytes:
        parts: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > limit:
                if response.status_code != 200:  # an error body: what came is enough to report
                    break
                raise RegistryError(f"{url}: the registry sent more than {limit} bytes {over}", url=url)
            parts.append(chunk)
        return b"".join(parts)[:limit]

    def _refused(self, url: str, response: httpx.Response) -> AuthError:
        detail = "; ".join(str(e.get("message", e.get("code", ""))) for e in _errors(response)) or "401"
        return AuthError(
            f"{self.base_url} refused {self._who()} for {httpx.URL(url).path} ({detail}); "
            "check the user name and password and that the account may use this repository",
            status=401,
            url=url,
        )

    def _fetch_token(self, challenge: Challenge, scope: str) -> str:
        """Get a bearer token from the challenge's realm (distribution token auth spec)."""
        realm = challenge.params.get("realm")
        if not realm:
            raise AuthError(f"{self.base_url} asked for a bearer token but named no realm to get it from", status=401)
        params = {k: v for k, v in (("service", challenge.params.get("service")),) if v}
        wanted = challenge.params.get("scope") or scope
        if wanted:
            params["scope"] = wanted
        auth = httpx.BasicAuth(self._username, self._password or "") if self._username is not None else None
        try:
            response = self._http.get(realm, params=params, auth=auth)
        except httpx.TransportError as exc:
            raise self._transport_error(realm, exc) from exc
        if response.status_code in (401, 403):
            raise AuthError(
                f"the token service {realm} refused {self._who()} for scope {wanted!r}: "
                + ("check the user name and password" if self._username else "pass a username and password"),
                status=response.status_code,
                url=realm,
            )
        if response.status_code != 200:
            raise RegistryError(
                f"the token service {realm} answered {response.status_code}: {response.text[:200]}",
                status=response.status_code,
                url=realm,
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise RegistryError(f"the token service {realm} did not answer JSON", url=realm) from exc
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"the token service {realm} answered without a token", url=realm)
        return token

    def _raise_for(self, response: httpx.Response, what: str, repo: str) -> None:
        """Turn an error answer into NotFoundError, AuthError or RegistryError."""
        if response.status_code < 400:
            return
        errors = _errors(response)
        codes = {str(e.get("code", "")) for e in errors}
        detail = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) or response.reason_phrase
        url = str(response.request.url)
        if response.status_code == 404 or codes & _NOT_FOUND_CODES:
            hint = (
                f"no repository {repo!r} there: check the name"
                if "NAME_UNKNOWN" in codes
                else f"check the name and tag; the tags of {repo!r} are listed by `skopeo list-tags docker://...`"
            )
            raise NotFoundError(
                f"{what} not found on {self.base_url} ({detail}); {hint}", status=response.status_code, url=url
            )
        if response.status_code == 403 or codes & {"DENIED", "UNAUTHORIZED"}:
            raise AuthError(
                f"{self.base_url} denied {self._who()} {what} ({detail}); the account lacks access to {repo!r}",
                status=response.status_code,
                url=url,
            )
        raise RegistryError(
            f"{self.base_url} failed {what}: HTTP {response.status_code} ({detail})",
            status=response.status_code,
            url=url,
        )

    @staticmethod
    def _scope(repo: str, push: bool = False) -> str:
        return f"repository:{repo}:{'pull,push' if push else 'pull'}"

    # --- API -----------------------------------------------------------------------------

    def ping(self) -> None:
        """``GET /v2/``: raises RegistryError unless the registry answers (401 counts:
        it is there and wants credentials)."""
        try:
            response = self._http.get(self.base_url + "/v2/")
        except httpx.TransportError as exc:
            raise self._transport_error(self.base_url + "/v2/", exc) from exc
        if response.status_code not in (200, 401):
            raise RegistryError(
                f"{self.base_url}/v2/ answered {response.status_code}: not an OCI registry?",
                status=response.status_code,
                url=self.base_url,
            )

    def get_manifest(self, repo: str, ref: str, accept: str = ACCEPT_ANY_MANIFEST) -> tuple[bytes, str, str]:
        """The manifest or index ``repo:ref`` (tag or digest): (body, media type, digest).
        The body is checked against ``ref`` when it is a digest and against the
        registry's ``Docker-Content-Digest``."""
        what = f"manifest {repo}{'@' if _is_digest(ref) else ':'}{ref}"
        response = self._send(
            "GET",
            f"/v2/{repo}/manifests/{ref}",
            scope=self._scope(repo),
            headers={"Accept": accept},
            limit=MANIFEST_LIMIT,
        )
        self._raise_for(response, what, repo)
        body = response.content
        digest = digest_of(body)
        for claimed in (ref if _is_digest(ref) else None, response.headers.get("Docker-Content-Digest")):
            if claimed:
                digest = verify_digest(body, claimed, what)
        media_type = response.headers.get("Content-Type", "").split(";", 1)[0].strip()
        if not (is_index(media_type) or is_manifest(media_type)):
            # Some registries answer application/json; the document says what it is.
            media_type = sniff_media_type(body) or media_type
        return body, media_type, digest

    def head_manifest(self, repo: str, ref: str, accept: str = ACCEPT_ANY_MANIFEST) -> Descriptor:
        """The descriptor (media type, digest, size) of ``repo:ref`` without its body
        when the registry sends ``Docker-Content-Digest``; else from a GET."""
        what = f"manifest {repo}{'@' if _is_digest(ref) else ':'}{ref}"
        response = self._send(
            "HEAD", f"/v2/{repo}/manifests/{ref}", scope=self._scope(repo), headers={"Accept": accept}
        )
        self._raise_for(response, what, repo)
        digest = response.headers.get("Docker-Content-Digest")
        length = response.headers.get("Content-Length")
        media_type = response.headers.get("Content-Type", "").split(";", 1)[0].strip()
        if digest and length and length.isdigit() and (is_index(media_type) or is_manifest(media_type)):
            if _is_digest(ref) and digest != ref:
                raise DigestMismatchError(f"{what}: the registry says its digest is {digest}")
            return Descriptor(mediaType=media_type, digest=digest, size=int(length))
        body, media_type, digest = self.get_manifest(repo, ref, accept)
        return Descriptor(mediaType=media_type, digest=digest, size=len(body))

    def get_blob(self, repo: str, digest: str, *, limit: int | None = None, over: str = "") -> bytes:
        """The blob ``digest`` of ``repo``, checked against its digest; with ``limit``, one
        over ``limit`` bytes is refused at the limit (RegistryError: ``over`` says why)."""
        what = f"blob {repo}@{digest}"
        url, scope = f"/v2/{repo}/blobs/{digest}", self._scope(repo)
        response = self._send("GET", url, scope=scope, limit=limit, over=over or f"for {what}; refused")
        self._raise_for(response, what, repo)
        verify_digest(response.content, digest, what)
        return response.content

    def has_blob(self, repo: str, digest: str) -> bool:
        response = self._send("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo))
        if response.status_code == 404:
            return False
        self._raise_for(response, f"blob {repo}@{digest}", repo)
        return True

    def push_blob(self, repo: str, data: bytes) -> str:
        """Upload ``data`` as a blob of ``repo`` (monolithic POST then PUT, distribution-spec
        "Pushing a blob monolithically"); skipped when the registry has it.  Returns its digest."""
        digest = digest_of(data)
        scope = self._scope(repo, push=True)
        if self.has_blob(repo, digest):
            return digest
        what = f"uploading blob {digest} to {repo}"
        started = self._send("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)
        self._raise_for(started, what, repo)
        location = started.headers.get("Location")
        if not location:
            raise RegistryError(f"{self.base_url}: {what}: the registry gave no upload Location", url=self.base_url)
        url = started.request.url.join(location).copy_merge_params({"digest": digest})
        done = self._send(
            "PUT",
            str(url),
            scope=scope,
            headers={"Content-Type": "application/octet-stream"},
            content=data,
        )
        self._raise_for(done, what, repo)
        return digest

    def put_manifest(self, repo: str, ref: str, body: bytes, media_type: str) -> str:
        """Store ``body`` as manifest ``repo:ref``; returns its digest."""
        what = f"pushing manifest {repo}:{ref}"
        response = self._send(
            "PUT",
            f"/v2/{repo}/manifests/{ref}",
            scope=self._scope(repo, push=True),
            headers={"Content-Type": media_type},
            content=body,
        )
        self._raise_for(response, what, repo)
        digest = digest_of(body)
        claimed = response.headers.get("Docker-Content-Digest")
        if claimed and claimed != digest:
            raise DigestMismatchError(f"{what}: the registry stored it as {claimed}, but its bytes hash to {digest}")
        return digest

    def tags(self, repo: str) -> list[str]:
        """Every tag of ``repo``, following ``Link: <...>; rel="next"`` pages."""
        tags: list[str] = []
        url = f"/v2/{repo}/tags/list"
        while url:
            response = self._send("GET", url, scope=self._scope(repo))
            self._raise_for(response, f"tag list of {repo}", repo)
            data = response.json()
            tags.extend(data.get("tags") or [])
            link = response.headers.get("Link", "")
            match = re.match(r"\s*<([^>]+)>\s*;\s*rel=\"?next\"?", link)
            url = str(response.request.url.join(match[1])) if match else ""
        return tags
