"""Big generated image indexes in front of ``FakeRegistry``, for load tests and the bench
(``python -m hetflow.registry.fakes.fakeproxy --big-indexes COUNT:BYTES``, issue 38).

    big = BigIndexes("load/big", count=50, size=4_000_000)
    transport = big.transport(fake)        # big.tags served here, the rest by ``fake``

Every entry is a GPU build (amd64 ``v4``, ``gpu:sm_90``, ``cuda>=12.4``, with
``org.hetflow.*`` annotations and a title), so a machine type without such a GPU is
refused by each entry and its "why nothing fits" answer names them.  With
``fitting=True`` an index is instead one generic amd64 build and an index annotation of
about ``size`` bytes, which a view keeps: every machine type gets a view that big.  The
indexes share one body of entries and differ in one annotation: the fake holds one copy,
so what a test measures in the proxy's process is the proxy, and each index has its own
digest, so each is a match of its own.  Digests are computed once here, never while serving.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable

import httpx

from hetflow.images import OCI_INDEX, OCI_MANIFEST
from hetflow.registry.fakes.fake import FakeRegistry

__all__ = ["BigIndexes"]

_PATH = re.compile(r"/v2/(?P<name>.+)/manifests/(?P<ref>[^/]+)\Z")
# A generic amd64 build: every x86-64 machine type runs it.
_GENERIC = json.dumps(
    {
        "mediaType": OCI_MANIFEST,
        "digest": "sha256:" + "0" * 64,
        "size": 1000,
        "platform": {"architecture": "amd64", "os": "linux"},
    },
    separators=(",", ":"),
).encode()


def _entries(size: int) -> bytes:
    """``,``-joined index entries, about ``size`` bytes in all."""
    parts: list[bytes] = []
    total = 0
    while total < size:
        n = len(parts)
        entry = {
            "mediaType": OCI_MANIFEST,
            "digest": "sha256:" + hashlib.sha256(b"entry %d" % n).hexdigest(),
            "size": 1000 + n,
            "platform": {
                "architecture": "amd64",
                "os": "linux",
                "variant": "v4",
                "features": ["x86-64-v4", "gpu:sm_90", "cuda>=12.4"],
            },
            "annotations": {
                "org.hetflow.gpu.sm": "90",
                "org.hetflow.cuda": "12.4",
                "org.opencontainers.image.title": f"build {n} for one GPU model " + "x" * 100,
            },
        }
        part = json.dumps(entry, separators=(",", ":")).encode()
        parts.append(part)
        total += len(part) + 1
    return b",".join(parts)


class BigIndexes:
    """``count`` indexes of about ``size`` bytes each, tagged ``big-0`` ... in ``repo``."""

    def __init__(self, repo: str, count: int, size: int, *, fitting: bool = False) -> None:
        self.repo = repo
        self.tags = [f"big-{i}" for i in range(count)]
        self._pad = b'"org.example.pad":"' + b"x" * max(0, size - 400) + b'",' if fitting else b""
        # Head and tail around the shared entries: the head's annotation tells them apart.
        self._entries = _GENERIC if fitting else _entries(max(0, size - 200))
        self._digests: dict[str, str] = {}
        for tag in self.tags:
            hasher = hashlib.sha256(self._head(tag))
            hasher.update(self._entries)
            hasher.update(b"]}")
            self._digests[tag] = "sha256:" + hasher.hexdigest()
        self._by_digest = {digest: tag for tag, digest in self._digests.items()}

    def _head(self, tag: str) -> bytes:
        head = {"schemaVersion": 2, "mediaType": OCI_INDEX}
        opening = json.dumps(head, separators=(",", ":")).encode()[:-1] + b',"annotations":{' + self._pad
        return opening + b'"org.example.index":"' + tag.encode() + b'"},"manifests":['

    def digest(self, tag: str) -> str:
        return self._digests[tag]

    def handle(self, request: httpx.Request) -> httpx.Response | None:
        """The answer for one of these indexes (by tag or digest); None for anything else."""
        match = _PATH.match(request.url.path)
        if match is None or match["name"] != self.repo:
            return None
        tag = self._by_digest.get(match["ref"], match["ref"])
        if tag not in self._digests:
            return None
        body = self._head(tag) + self._entries + b"]}"
        headers = {"Content-Type": OCI_INDEX, "Docker-Content-Digest": self._digests[tag]}
        if request.method == "HEAD":
            return httpx.Response(200, headers={**headers, "Content-Length": str(len(body))})
        return httpx.Response(200, headers=headers, content=body)

    def handler(self, fallback: Callable[[httpx.Request], httpx.Response]) -> Callable[[httpx.Request], httpx.Response]:
        """A handler serving these indexes and, for everything else, ``fallback``."""
        return lambda request: self.handle(request) or fallback(request)

    def transport(self, fallback: FakeRegistry) -> httpx.MockTransport:
        """A transport serving these indexes and, for everything else, ``fallback``."""
        return httpx.MockTransport(self.handler(lambda request: fallback.handle(request)))
