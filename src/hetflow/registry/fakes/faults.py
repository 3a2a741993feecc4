"""A faulty upstream for tests: the fake registry behind a transport that corrupts and
drops a given fraction of blob bodies, with a seeded RNG (the same seed, the same faults).

    fake = FakeRegistry()
    faulty = FaultyUpstream(fake, corrupt=0.01, drop=0.01, seed=7)
    app = create_app(settings, transport=faulty.transport())

Each blob GET that the fake answers with a body is, independently, corrupted (one byte
flipped at a random offset: the bytes of a flaky link or a bad cache in between) with
probability ``corrupt`` and cut off (``httpx.ReadError`` after a random number of
bytes: a reset connection) with probability ``drop``.  Manifests pass untouched: the
proxy's manifest path is checked by its own tests.  ``injected`` counts what was done;
``blob_gets`` counts blob GETs per digest (to see that concurrent pulls fetched once);
``script`` names the fault of each next blob GET, for tests that want one exact story.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx

from hetflow.registry.fakes.fake import FakeRegistry

__all__ = ["FaultyUpstream", "Injected"]


@dataclass
class Injected:
    corrupted: int = 0
    dropped: int = 0


@dataclass
class FaultyUpstream:
    fake: FakeRegistry
    corrupt: float = 0.0
    drop: float = 0.0
    seed: int = 0
    injected: Injected = field(default_factory=Injected)
    blob_gets: Counter[str] = field(default_factory=Counter)
    # Scripted faults, one per blob GET before the RNG decides: "corrupt", "drop", "both",
    # "ok", or an HTTP status ("503") answered instead of the body.
    script: list[str] = field(default_factory=list)
    ranges_asked: int = 0  # blob GETs that carried a Range header (resumes)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()  # the proxy reads blobs from worker threads

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = self.fake.handle(request)
        path = request.url.path
        if request.method != "GET" or "/blobs/" not in path or response.status_code not in (200, 206):
            return response
        with self._lock:
            self.blob_gets[path.rsplit("/", 1)[1]] += 1
            self.ranges_asked += "range" in request.headers
            data = response.read()
            step = self.script.pop(0) if self.script else None
            if step is not None and step.isdigit():
                return httpx.Response(int(step), json={"errors": [{"code": "UNAVAILABLE", "message": "scripted"}]})
            corrupt = bool(data) and self._rng.random() < self.corrupt
            drop = bool(data) and self._rng.random() < self.drop
            if step is not None:
                corrupt, drop = bool(data) and step in ("corrupt", "both"), bool(data) and step in ("drop", "both")
            flip = self._rng.randrange(len(data)) if data else 0
            cut = self._rng.randrange(len(data)) if data else 0
            self.injected.corrupted += corrupt
            self.injected.dropped += drop
        if corrupt:
            data = data[:flip] + bytes([data[flip] ^ 0x01]) + data[flip + 1 :]
        stream = _Breaking(data, cut if drop else None)
        headers = [(k, v) for k, v in response.headers.multi_items()]
        return httpx.Response(response.status_code, headers=headers, stream=stream)


class _Breaking(httpx.SyncByteStream, httpx.AsyncByteStream):
    """``data`` in 64 KiB pieces; with ``cut``, a reset connection after ``cut`` bytes."""

    def __init__(self, data: bytes, cut: int | None, size: int = 64 * 1024) -> None:
        self.data = data
        self.cut = cut
        self.size = size

    def __iter__(self) -> Iterator[bytes]:
        end = len(self.data) if self.cut is None else self.cut
        for start in range(0, end, self.size):
            yield self.data[start : min(start + self.size, end)]
        if self.cut is not None:
            raise httpx.ReadError(f"connection reset by peer after {self.cut} of {len(self.data)} bytes")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk
