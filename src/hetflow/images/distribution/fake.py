"""An in-memory OCI registry behind ``httpx.MockTransport``: the fake for the registry seam.

It serves the part of the distribution API that hetflow uses (manifests, blobs,
monolithic uploads, tag lists with ``Link`` paging) and, when asked, guards it the way
real registries do: ``auth="basic"`` wants a user name and password on every request;
``auth="bearer"`` answers ``401`` with a ``WWW-Authenticate: Bearer`` challenge and
hands out scoped tokens at ``https://auth.test/token`` (distribution's token auth spec).
``requests`` records what it saw, so tests can assert on the flow.

    registry = FakeRegistry(auth="bearer", users={"ci": "secret"})
    desc = registry.add_image("team/app", "v3", env={"BUILD": "v3"})
    client = RegistryClient(registry.base_url, username="ci", password="secret",
                            transport=registry.transport())
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from hetflow.images.oci import OCI_CONFIG, OCI_MANIFEST, Descriptor, digest_of, is_index, sniff_media_type

__all__ = ["FakeRegistry"]

TOKEN_REALM = "https://auth.test/token"
_MANIFEST = re.compile(r"/v2/(?P<repo>.+)/manifests/(?P<ref>[^/]+)\Z")
_BLOB = re.compile(r"/v2/(?P<repo>.+)/blobs/(?P<digest>[^/]+:[^/]+)\Z")
_UPLOAD = re.compile(r"/v2/(?P<repo>.+)/blobs/uploads/(?P<id>[^/]*)\Z")
_TAGS = re.compile(r"/v2/(?P<repo>.+)/tags/list\Z")
_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = json.dumps({"errors": [{"code": code, "message": message, "detail": None}]}).encode()
    return httpx.Response(status, content=body, headers={"Content-Type": "application/json", **(headers or {})})


@dataclass
class FakeRegistry:
    """A registry in a dict.  ``users`` are name -> password; with ``anonymous_pull``
    a bearer registry gives pull tokens to anyone."""

    host: str = "registry.test"
    auth: Literal["none", "basic", "bearer"] = "none"
    users: dict[str, str] = field(default_factory=dict)
    anonymous_pull: bool = False
    page_size: int = 100
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # digest -> (body, media type)
    tags: dict[tuple[str, str], str] = field(default_factory=dict)  # (repo, tag) -> digest
    tampered: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (repo, ref) -> bytes served instead
    requests: list[httpx.Request] = field(default_factory=list)
    tokens: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # token -> (user, scope)

    @property
    def base_url(self) -> str:
        return f"https://{self.host}"

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # --- content ---------------------------------------------------------------------------

    def add_blob(self, data: bytes) -> str:
        digest = digest_of(data)
        self.blobs[digest] = data
        return digest

    def add_manifest(self, repo: str, body: bytes, media_type: str, tag: str | None = None) -> Descriptor:
        digest = digest_of(body)
        self.manifests[digest] = (body, media_type)
        if tag is not None:
            self.tags[(repo, tag)] = digest
        return Descriptor(mediaType=media_type, digest=digest, size=len(body))

    def add_image(
        self,
        repo: str,
        tag: str | None,
        *,
        os: str = "linux",
        architecture: str = "amd64",
        variant: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Descriptor:
        """A one-layer image (the layer is a few bytes, not a real tar) under ``repo:tag``."""
        config: dict[str, Any] = {"architecture": architecture, "os": os, "rootfs": {"type": "layers", "diff_ids": []}}
        if variant:
            config["variant"] = variant
        config["config"] = {"Env": [f"{k}={v}" for k, v in (env or {}).items()]}
        config_bytes = json.dumps(config, sort_keys=True).encode()
        layer = f"layer of {repo}:{tag} {sorted((env or {}).items())}".encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": self.add_blob(config_bytes), "size": len(config_bytes)},
            "layers": [{"mediaType": _LAYER, "digest": self.add_blob(layer), "size": len(layer)}],
        }
        return self.add_manifest(repo, json.dumps(manifest).encode(), OCI_MANIFEST, tag)

    def tamper(self, repo: str, ref: str, body: bytes) -> None:
        """Serve ``body`` for ``repo:ref`` (a tag or digest) with the true digest header:
        what a broken mirror or a man in the middle would do."""
        self.tampered[(repo, ref)] = body

    # --- auth ------------------------------------------------------------------------------

    def _basic_user(self, request: httpx.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if self.users.get(user) == password else None

    def _authorized(self, request: httpx.Request, repo: str | None, action: str) -> httpx.Response | None:
        """None when the request may go on, else the 401 to send."""
        if self.auth == "none":
            return None
        if self.auth == "basic":
            if self._basic_user(request) is not None:
                return None
            return _error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": 'Basic realm="fake"'})
        scope = f"repository:{repo}:{'pull,push' if action == 'push' else 'pull'}" if repo else ""
        header = request.headers.get("Authorization", "")
        granted = self.tokens.get(header[7:]) if header.startswith("Bearer ") else None
        if granted is not None and (not repo or _covers(granted[1], repo, action)):
            return None
        challenge = f'Bearer realm="{TOKEN_REALM}",service="{self.host}"' + (f',scope="{scope}"' if scope else "")
        return _error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": challenge})

    def _token(self, request: httpx.Request) -> httpx.Response:
        scope = request.url.params.get("scope", "")
        user = self._basic_user(request)
        if request.headers.get("Authorization") and user is None:
            return httpx.Response(401, json={"details": "incorrect username or password"})
        pull_only = scope.endswith(":pull")
        if user is None and not (self.anonymous_pull and pull_only):
            return httpx.Response(401, json={"details": "access to the requested resource is not authorized"})
        token = f"token-{len(self.tokens) + 1}"
        self.tokens[token] = (user, scope)
        return httpx.Response(200, json={"token": token, "expires_in": 300})

    # --- the API ---------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.host == "auth.test":
            return self._token(request)
        path, method = request.url.path, request.method
        action = "pull" if method in ("GET", "HEAD") else "push"
        if path == "/v2/":
            return self._authorized(request, None, action) or httpx.Response(200, json={})
        for pattern, serve in (
            (_MANIFEST, self._manifest),
            (_UPLOAD, self._upload),
            (_BLOB, self._blob),
            (_TAGS, self._tags),
        ):
            match = pattern.match(path)
            if match:
                denied = self._authorized(request, match["repo"], action)
                return denied or serve(request, match)
        return _error(404, "NOT_FOUND", f"no route for {method} {path}")

    def _manifest(self, request: httpx.Request, match: re.Match[str]) -> httpx.Response:
        repo, ref = match["repo"], match["ref"]
        if request.method == "PUT":
            media_type = request.headers.get("Content-Type", "") or sniff_media_type(request.content) or ""
            desc = self.add_manifest(repo, request.content, media_type, None if ":" in ref else ref)
            return httpx.Response(201, headers={"Docker-Content-Digest": desc.digest, "Location": request.url.path})
        digest = ref if ":" in ref else self.tags.get((repo, ref))
        if digest is None or digest not in self.manifests:
            return _error(404, "MANIFEST_UNKNOWN", f"manifest unknown: {repo}:{ref}")
        body, media_type = self.manifests[digest]
        accept = request.headers.get("Accept", "")
        if is_index(media_type) and accept and media_type not in accept:
            return _error(404, "MANIFEST_UNKNOWN", "manifest unknown: an index, and the client does not accept one")
        body = self.tampered.get((repo, ref), body)
        headers = {"Content-Type": media_type, "Docker-Content-Digest": digest, "Content-Length": str(len(body))}
        return httpx.Response(200, content=b"" if request.method == "HEAD" else body, headers=headers)

    def _blob(self, request: httpx.Request, match: re.Match[str]) -> httpx.Response:
        digest = match["digest"]
        if digest not in self.blobs:
            return _error(404, "BLOB_UNKNOWN", f"blob unknown: {digest}")
        body = self.tampered.get((match["repo"], digest), self.blobs[digest])
        headers = {"Docker-Content-Digest": digest, "Content-Length": str(len(body))}
        return httpx.Response(200, content=b"" if request.method == "HEAD" else body, headers=headers)

    def _upload(self, request: httpx.Request, match: re.Match[str]) -> httpx.Response:
        if request.method == "POST":
            location = f"/v2/{match['repo']}/blobs/uploads/upload-{len(self.requests)}?state=opaque"
            return httpx.Response(202, headers={"Location": location})
        digest = request.url.params.get("digest", "")
        if digest_of(request.content) != digest:
            return _error(400, "DIGEST_INVALID", "provided digest did not match uploaded content")
        self.blobs[digest] = request.content
        return httpx.Response(201, headers={"Docker-Content-Digest": digest})

    def _tags(self, request: httpx.Request, match: re.Match[str]) -> httpx.Response:
        repo = match["repo"]
        names = sorted(tag for (r, tag) in self.tags if r == repo)
        if not names:
            return _error(404, "NAME_UNKNOWN", f"repository name not known to registry: {repo}")
        last = request.url.params.get("last")
        if last:
            names = [n for n in names if n > last]
        page, rest = names[: self.page_size], names[self.page_size :]
        headers = {}
        if rest:
            headers["Link"] = f'</v2/{repo}/tags/list?n={self.page_size}&last={page[-1]}>; rel="next"'
        return httpx.Response(200, json={"name": repo, "tags": page}, headers=headers)


def _covers(scope: str, repo: str, action: str) -> bool:
    """True when a granted token scope (``repository:REPO:pull,push``) allows ``action`` on ``repo``."""
    for part in scope.split():
        kind, _, rest = part.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind == "repository" and name == repo and action in actions.split(","):
            return True
    return False
