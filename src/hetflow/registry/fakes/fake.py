"""A fake upstream registry for tests: an in-memory OCI distribution API behind an
``httpx.MockTransport``.  It is the proxy's test seam: ``create_app(transport=...)``
sends every upstream request through it, so the proxy's unit tests (and its stream
tests, through ``start_in_thread``) run without a real registry.

    fake = FakeRegistry()
    index = fake.push_builds("lab/app", "v1", {"generic": [], "v3": ["x86-64-v3"]})
    app = create_app(settings, transport=fake.transport())

Knobs: ``corrupt(digest)`` serves other bytes under a blob's digest; ``auth`` makes it
demand Basic credentials (``"basic"``) or a bearer from its own realm (``"bearer"``);
``requests`` records every ``(method, path)``, so tests can see what was fetched;
blob GETs honour ``Range: bytes=N-`` unless ``ranges`` is False.  ``hetflow.registry.fakes.faults``
wraps it in an upstream that corrupts and drops a given fraction of blob bodies.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from hetflow.images import (
    DOCKER_MANIFEST_LIST,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_MANIFEST,
    digest_of,
    parse_requirements,
    platform_for,
)

__all__ = ["FakeRegistry"]

_PATH = re.compile(r"/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)\Z")
_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _json(data: Any) -> bytes:
    # Indented, like podman writes: the filtered view's canonical bytes always differ.
    return json.dumps(data, indent=3).encode()


@dataclass
class FakeRegistry:
    """Repositories of manifests (by tag and digest) and blobs, served over HTTP."""

    auth: str | None = None  # None, "basic" or "bearer"
    username: str = "robot"
    password: str = "hunter2-hunter2"
    host: str = "upstream.test"
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, dict[str, tuple[bytes, str]]] = field(default_factory=dict)  # repo -> ref -> body, type
    corrupted: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    ranges: bool = True  # honour "Range: bytes=N-" on blobs (False: always the whole body)

    def add_blob(self, data: bytes) -> str:
        digest = digest_of(data)
        self.blobs[digest] = data
        return digest

    def put_manifest(self, repo: str, body: bytes, media_type: str, tag: str | None = None) -> str:
        digest = digest_of(body)
        refs = self.manifests.setdefault(repo, {})
        refs[digest] = (body, media_type)
        if tag is not None:
            refs[tag] = (body, media_type)
        return digest

    def push_image(self, repo: str, build: str, layer: bytes | None = None, tag: str | None = None) -> dict[str, Any]:
        """One image whose config says ``BUILD=<build>``; returns its descriptor."""
        config = _json({"architecture": "amd64", "os": "linux", "config": {"Env": [f"BUILD={build}"]}})
        layer = layer if layer is not None else f"layer of {build}".encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": self.add_blob(config), "size": len(config)},
            "layers": [{"mediaType": _LAYER, "digest": self.add_blob(layer), "size": len(layer)}],
        }
        body = _json(manifest)
        return {
            "mediaType": OCI_MANIFEST,
            "digest": self.put_manifest(repo, body, OCI_MANIFEST, tag),
            "size": len(body),
        }

    def push_builds(self, repo: str, tag: str, builds: dict[str, list[str]], *, docker_list: bool = False) -> str:
        """An index of one image per build (``{"v3": ["x86-64-v3"], ...}``, features
        as ``platform.features``); returns the index digest."""
        entries = []
        for build, features in builds.items():
            desc = self.push_image(repo, build)
            desc["platform"] = platform_for(parse_requirements(features)).model_dump(by_alias=True, exclude_none=True)
            entries.append(desc)
        media_type = DOCKER_MANIFEST_LIST if docker_list else OCI_INDEX
        body = _json({"schemaVersion": 2, "mediaType": media_type, "manifests": entries})
        return self.put_manifest(repo, body, media_type, tag)

    def corrupt(self, digest: str) -> None:
        """Serve other bytes (same length) under ``digest`` from now on."""
        data = self.blobs[digest]
        self.corrupted[digest] = bytes([data[0] ^ 0xFF]) + data[1:] if data else b"x"

    # --- HTTP ----------------------------------------------------------------------------

    def transport(self) -> httpx.MockTransport:
        # Looked up per request, so a test may swap ``handle`` for a failing one.
        return httpx.MockTransport(lambda request: self.handle(request))

    def _authorized(self, request: httpx.Request) -> bool:
        header = str(request.headers.get("authorization", ""))
        basic = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        if self.auth == "basic":
            return header == basic
        if self.auth == "bearer":
            return header == "Bearer fake-upstream-bearer"
        return True

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests.append((request.method, path))
        if path == "/token":
            basic = "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            if request.headers.get("authorization") != basic:
                return httpx.Response(401)
            return httpx.Response(200, json={"token": "fake-upstream-bearer"})
        if not self._authorized(request):
            challenge = (
                'Basic realm="fake"'
                if self.auth == "basic"
                else f'Bearer realm="http://{self.host}/token",service="fake"'
            )
            return _error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": challenge})
        match = _PATH.match(path)
        if match is None:
            return _error(404, "NAME_UNKNOWN", "no such endpoint")
        repo, kind, ref = match["name"], match["kind"], match["ref"]
        if repo not in self.manifests:
            return _error(404, "NAME_UNKNOWN", "repository name not known to registry")
        head = request.method == "HEAD"
        if kind == "manifests":
            if ref not in self.manifests[repo]:
                return _error(404, "MANIFEST_UNKNOWN", "manifest unknown", {}, {"Tag": ref})
            body, media_type = self.manifests[repo][ref]
            headers = {"Content-Type": media_type, "Docker-Content-Digest": digest_of(body)}
            return httpx.Response(200, headers=headers, stream=_Chunks(b"" if head else body))
        if ref not in self.blobs:
            return _error(404, "BLOB_UNKNOWN", "blob unknown to registry", {}, {"digest": ref})
        data = self.corrupted.get(ref, self.blobs[ref])
        headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref}
        headers["Content-Length"] = str(len(data))
        start = _range_start(request.headers.get("range"), len(data)) if self.ranges else None
        if start is not None and not head:
            # RFC 9110 14.4: 206 with Content-Range: bytes first-last/complete
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            headers["Content-Length"] = str(len(data) - start)
            return httpx.Response(206, headers=headers, stream=_Chunks(data[start:]))
        return httpx.Response(200, headers=headers, stream=_Chunks(b"" if head else data))


class _Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that arrives in pieces, as from a socket (a plain ``content=`` is read
    at once), for the sync and the async client alike."""

    def __init__(self, data: bytes, size: int = 64 * 1024) -> None:
        self.data = data
        self.size = size

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.data), self.size):
            yield self.data[start : start + self.size]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


def _range_start(header: str | None, size: int) -> int | None:
    """N of ``bytes=N-`` when 0 < N < size; else None (the whole body)."""
    match = re.fullmatch(r"bytes=(\d+)-", (header or "").strip())
    start = int(match[1]) if match else 0
    return start if 0 < start < size else None


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, detail: Any = None
) -> httpx.Response:
    entry: dict[str, Any] = {"code": code, "message": message}
    if detail is not None:
        entry["detail"] = detail
    return httpx.Response(status, headers=headers, json={"errors": [entry]})
