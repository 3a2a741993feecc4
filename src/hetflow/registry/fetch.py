"""Upstream blobs into the cache: verified, retried, fetched once however many ask.

``BlobFetcher.fill(repo, digest)`` returns when the blob is in the cache (``None``) or
with the error response the caller should get.  Three things it guarantees:

* **Nothing unverified is kept.**  The body is hashed as it is written to a temporary
  file (``HashedChunks`` with the cache writer as sink); only a body that hashes to its
  digest is renamed into the cache.  Clients are served from the cache afterwards, so
  no client ever receives a byte the proxy has not verified, and every failure is an
  OCI error body (``502 DIGEST_INVALID`` or ``502 UNAVAILABLE``) rather than a cut
  stream.  The price: the first pull of a blob starts sending once the proxy has all
  of it (time to first byte = the upstream download).
* **Transient faults are retried.**  A connection that drops mid-body is resumed with
  ``Range: bytes=N-`` (a ``206`` continues the hash; an upstream that ignores Range
  answers ``200`` and the first N bytes are skipped); a body that hashes wrong, an
  upstream that cannot be reached, or a 429/5xx is fetched again from the start.
  ``attempts`` bounds each (default 3, backoff 0.1 s, 0.2 s, ...): corruption in
  transit is transient, a blob that is wrong on the upstream's disk is not.
* **One upstream fetch per blob at a time.**  Concurrent requests for the same digest,
  under any repository name, await the same fill (single-flight); one that asks while
  it is running is served from the cache it fills.
* **Bounded.**  A body over ``max_blob_bytes`` (or announced as such) is refused, not
  retried; an upstream silent for the idle timeout (httpx's read timeout) breaks off
  and is resumed or retried; the whole fill, every attempt included, gives up after
  ``total_timeout_s`` (issue 23: an endless upstream filled the disk, a slow one held a
  worker 200 s after every client left).  A full disk answers ``507`` and leaves no
  temporary file; after each new blob the cache is trimmed to its quota (LRU).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass

import httpx
from starlette.responses import Response

from hetflow.images import RegistryError
from hetflow.registry.errors import ErrorCode, error_response
from hetflow.registry.store import BlobStore
from hetflow.registry.upstream import BLOB_CHUNK, Upstream
from hetflow.registry.verify import HashedChunks

__all__ = ["BlobFetcher", "FetchStats"]

log = logging.getLogger("hetflow.registry")

# Statuses worth asking again (RFC 9110 15.6; 429: RFC 6585 4); anything else is the answer.
_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})


@dataclass
class FetchStats:
    """Counters for tests and the benchmark: what the upstream was asked, and why again."""

    fetches: int = 0  # fills started (one per blob however many clients wait on it)
    requests: int = 0  # upstream blob GETs, resumes included
    refetches: int = 0  # whole bodies fetched again (bad digest, unreachable, 5xx)
    resumes: int = 0  # dropped bodies continued with Range (or skipped up to where they broke)
    failures: int = 0  # fills that gave up


class _Refused(Exception):
    """Not worth another attempt: too large, too slow overall, or the disk is full."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _Failed(Exception):
    """One attempt failed in a way worth retrying; ``code`` and the message go to the client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class BlobFetcher:
    def __init__(
        self,
        upstream: Upstream,
        blobs: BlobStore,
        executor: Executor,
        *,
        attempts: int = 3,
        backoff_s: float = 0.1,
        error: Callable[[int, bytes], Response],
        max_blob_bytes: int = 10 * 1024**3,
        total_timeout_s: float = 3600.0,
    ) -> None:
        self.max_blob_bytes = max_blob_bytes
        self.total_timeout_s = total_timeout_s
        self.upstream = upstream
        self.blobs = blobs
        self.executor = executor
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.stats = FetchStats()
        self._error = error  # an upstream non-200 as the client's response (proxy.upstream_error)
        self._inflight: dict[str, asyncio.Future[Response | None]] = {}

    async def fill(self, repo: str, digest: str) -> Response | None:
        # By digest alone: the bytes are the same under every name (issue 23: one blob
        # under 20 names was fetched 20 times at once).
        key = digest
        running = self._inflight.get(key)
        if running is None:
            if self.blobs.size(digest) is not None:
                return None
            running = self._inflight[key] = asyncio.ensure_future(self._fill(repo, digest))
            running.add_done_callback(lambda _: self._inflight.pop(key, None))
        # shield: a client that hangs up does not cancel the fill the others wait on.
        return await asyncio.shield(running)

    def _pause(self, attempt: int) -> float:
        return float(self.backoff_s * 2**attempt)

    async def _fill(self, repo: str, digest: str) -> Response | None:
        self.stats.fetches += 1
        last = _Failed(ErrorCode.UNAVAILABLE, "not tried")
        deadline = time.monotonic() + self.total_timeout_s
        for attempt in range(self.attempts):
            if attempt:
                self.stats.refetches += 1
                await asyncio.sleep(self._pause(attempt - 1))
            try:
                answer = await self._attempt(repo, digest, deadline)
                if answer is None:
                    await asyncio.get_running_loop().run_in_executor(self.executor, self.blobs.evict, digest)
            except _Refused as refused:
                self.stats.failures += 1
                log.error("blob %s@%s: %s", repo, digest, refused)
                return error_response(refused.status, refused.code, f"upstream blob {repo}@{digest}: {refused}")
            except _Failed as failed:
                last = failed
                log.warning("blob %s@%s, attempt %d of %d: %s", repo, digest, attempt + 1, self.attempts, failed)
                continue
            return answer
        self.stats.failures += 1
        message = f"upstream blob {repo}@{digest}: gave up after {self.attempts} attempts; the last: {last}"
        log.error("%s", message)
        return error_response(502, last.code, message, {"digest": digest, "attempts": self.attempts})

    async def _attempt(self, repo: str, digest: str, deadline: float) -> Response | None:
        loop = asyncio.get_running_loop()
        try:
            self.stats.requests += 1
            response = await self.upstream.open_blob(repo, digest, self.executor)
        except RegistryError as err:
            raise _Failed(ErrorCode.UNAVAILABLE, str(err)) from err
        if response.status_code != 200:
            raw = await loop.run_in_executor(self.executor, _read_error, response)
            if response.status_code in _TRANSIENT:
                raise _Failed(ErrorCode.UNAVAILABLE, f"upstream answered {response.status_code}")
            return self._error(response.status_code, raw)
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_blob_bytes:
            await loop.run_in_executor(self.executor, response.close)
            raise _Refused(502, ErrorCode.SIZE_INVALID, self._too_big())
        reader = _Resuming(self, repo, digest, response, deadline)
        try:
            sink = self.blobs.writer(digest)
        except OSError as err:
            await loop.run_in_executor(self.executor, response.close)
            raise _disk(err) from err
        chunks = HashedChunks(reader, digest, self.executor, sink=sink, close=reader.close)
        try:
            async for _ in chunks:
                pass  # the worker thread hashes and writes; the loop only waits
        except _Refused:
            raise
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk(err) from err
            raise _Failed(ErrorCode.UNAVAILABLE, f"reading the body failed: {err!r}") from err
        except (httpx.HTTPError, RegistryError) as err:
            raise _Failed(ErrorCode.UNAVAILABLE, f"reading the body failed: {err!r}") from err
        if not chunks.matched:
            raise _Failed(ErrorCode.DIGEST_INVALID, f"the body hashes to {chunks.actual}; not kept")
        return None

    def _too_big(self) -> str:
        return f"larger than {self.max_blob_bytes} bytes (limits.max_blob_bytes); not cached"


def _disk(err: OSError) -> _Refused:
    return _Refused(507, ErrorCode.UNAVAILABLE, f"the proxy's blob cache cannot store it: {err.strerror}")


class _Resuming:
    """The body of one upstream GET, continued across dropped connections (runs in a
    worker thread, inside ``HashedChunks``): each break is followed by at most
    ``attempts - 1`` requests for the rest."""

    def __init__(self, fetcher: BlobFetcher, repo: str, digest: str, response: httpx.Response, deadline: float) -> None:
        self.deadline = deadline
        self.fetcher = fetcher
        self.repo = repo
        self.digest = digest
        self.response = response

    def close(self) -> None:
        self.response.close()

    def __iter__(self) -> Iterator[bytes]:
        fetcher = self.fetcher
        offset = 0  # bytes handed on so far
        skip = 0  # bytes of the current response already handed on (an upstream without Range)
        breaks = 0
        pending: list[bytes] = []  # coalesced to BLOB_CHUNK: fewer hand-offs to the event loop
        pending_size = 0
        while True:
            try:
                for chunk in self.response.iter_bytes():
                    if skip:
                        dropped = min(skip, len(chunk))
                        skip -= dropped
                        chunk = chunk[dropped:]
                        if not chunk:
                            continue
                    offset += len(chunk)
                    if offset > fetcher.max_blob_bytes:
                        raise _Refused(502, ErrorCode.SIZE_INVALID, fetcher._too_big())
                    if time.monotonic() > self.deadline:
                        raise _Refused(
                            504,
                            ErrorCode.UNAVAILABLE,
                            f"not complete after {fetcher.total_timeout_s:g} s (limits.upstream_total_timeout_s)",
                        )
                    pending.append(chunk)
                    pending_size += len(chunk)
                    if pending_size >= BLOB_CHUNK:
                        yield b"".join(pending)
                        pending, pending_size = [], 0
                if skip:
                    raise httpx.RemoteProtocolError(f"the body ended {skip} bytes before where it broke before")
                if pending:
                    yield b"".join(pending)
                return
            except httpx.TransportError as err:  # ReadError, RemoteProtocolError: the connection went
                self.response.close()
                if pending:  # what did arrive is kept: the resume asks for what follows it
                    yield b"".join(pending)
                    pending, pending_size = [], 0
                breaks += 1
                if breaks >= fetcher.attempts:
                    raise
                log.warning("blob %s@%s broke off after %d bytes (%r); resuming", self.repo, self.digest, offset, err)
                fetcher.stats.resumes += 1
                fetcher.stats.requests += 1
                time.sleep(fetcher._pause(breaks - 1))
                self.response = fetcher.upstream.open_blob_sync(self.repo, self.digest, start=offset)
                skip = self._check_resumed(offset)

    def _check_resumed(self, offset: int) -> int:
        """How many leading bytes of the new response to skip; raises if it is no body."""
        response = self.response
        if response.status_code == 206:
            # RFC 9110 14.4: Content-Range: bytes first-last/complete
            if not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
                raise httpx.RemoteProtocolError(
                    f"asked for bytes {offset}-, got {response.headers.get('content-range')}"
                )
            return 0
        if response.status_code == 200:
            return offset  # Range ignored (allowed, RFC 9110 14.2): the whole body again
        raise httpx.RemoteProtocolError(f"resuming at byte {offset}: upstream answered {response.status_code}")


def _read_error(response: httpx.Response, limit: int = 64 * 1024) -> bytes:
    """At most ``limit`` bytes of an error body (worker thread)."""
    parts: list[bytes] = []
    try:
        for chunk in response.iter_bytes():
            parts.append(chunk)
            if sum(map(len, parts)) >= limit:
                break
    finally:
        response.close()
    return b"".join(parts)[:limit]
