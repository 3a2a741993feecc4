"""Upstream blobs into the cache: verified, retried, bounded in time and rate, fetched once
however many ask.

``BlobFetcher.fill(repo, digest, receive=...)`` returns when the blob is in the cache
(``None``) or with the error response the caller should get.  What it guarantees:

* **Nothing unverified is kept.**  The body is hashed as it is written to a temporary
  file; only a body that hashes to its digest is renamed into the cache.  Clients are
  served from the cache afterwards, so no client ever receives a byte the proxy has not
  verified, and every failure is an OCI error body rather than a cut stream.  The price:
  the first pull of a blob starts sending once the proxy has all of it.
* **Transient faults are retried.**  A connection that drops mid-body is resumed with
  ``Range: bytes=N-`` (a ``206`` continues the hash; an upstream that ignores Range
  answers ``200`` and the first N bytes are skipped); a body that hashes wrong, an
  upstream that cannot be reached, or a 429/5xx is fetched again from the start.
  ``attempts`` bounds each (default 3, backoff 0.1 s, 0.2 s, ...).
* **One fill per blob, shared.**  Concurrent requests for the same digest, under any
  repository name, wait for the same fill; one that hangs up (``receive`` says
  ``http.disconnect``) stops waiting without ending it for the others.
* **Fills cannot starve anyone.**  A fill reads the upstream on the event loop and holds
  no thread while it waits for bytes; hashing and writing go, a chunk at a time, to the
  fetcher's own small pool, never the one cached blobs are read with.  At most
  ``max_fills`` fills of distinct blobs run at once (the rest wait for a slot; serving a
  cached blob never does).  Each ends by its deadline, earlier when it is slower than
  the minimum rate, and at once when nobody waits for it any more and it is slow
  (``hetflow.registry.cache.fillwatch``: issue 38, where fills of one byte every 20 s held every
  blob thread for an hour).  Its clients then get ``503 BLOB_UNKNOWN`` naming the upstream
  and the rate; its upstream connection is closed and its temporary file removed.
* **Bounded.**  A body over ``max_blob_bytes`` (or announced as such) is refused, not
  retried; an upstream silent for the idle timeout (httpx's read timeout) breaks off and
  is resumed or retried.  A full disk answers ``507`` and leaves no temporary file; after
  each new blob the cache is trimmed to its quota (LRU).
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.responses import Response
from starlette.types import Receive

from hetflow.images import RegistryError
from hetflow.registry.cache.fillwatch import Clock, FillRules, LoopClock, Progress, Verdict, explain, judge
from hetflow.registry.cache.store import BlobStore, BlobWriter, new_hasher
from hetflow.registry.cache.upstream import Upstream
from hetflow.registry.errors import ErrorCode, error_response
from hetflow.registry.settings import Limits

__all__ = ["BlobFetcher", "FetchStats", "until_disconnect"]

log = logging.getLogger("hetflow.registry")

# Statuses worth asking again (RFC 9110 15.6; 429: RFC 6585 4); anything else is the answer.
_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
# Bytes handed to the pool at a time: at 512 KiB a cold 200 MiB fill took as long as when a
# thread read it (about 2 s here), and a fill holds about 1 MiB.
_CHUNK = 512 * 1024
_ERROR_LIMIT = 64 * 1024


@dataclass
class FetchStats:
    """Counters for tests and the benchmark: what the upstream was asked, and why again."""

    fetches: int = 0  # fills started (one per blob however many clients wait on it)
    requests: int = 0  # upstream blob GETs, resumes included
    refetches: int = 0  # whole bodies fetched again (bad digest, unreachable, 5xx)
    resumes: int = 0  # dropped bodies continued with Range (or skipped up to where they broke)
    failures: int = 0  # fills that gave up
    timed_out: int = 0  # fills ended by their deadline or the minimum rate, their clients told
    cancelled: int = 0  # fills nobody waited for any more, ended because they were slow


class _Refused(Exception):
    """Not worth another attempt: too large, or the disk is full."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class _Failed(Exception):
    """One attempt failed in a way worth retrying; ``code`` and the message go to the client."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class _Fill:
    repo: str
    digest: str
    progress: Progress
    waiters: int = 0
    task: asyncio.Future[Response | None] | None = None  # the fill and its verdict, shared
    body: asyncio.Future[Response | None] | None = None  # the upstream reading, cancelled by a verdict
    verdict: Verdict | None = None


async def until_disconnect(receive: Receive) -> None:
    """Returns when the client has gone (ASGI ``http.disconnect``)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class BlobFetcher:
    def __init__(
        self,
        upstream: Upstream,
        blobs: BlobStore,
        *,
        error: Callable[[int, bytes], Response],
        executor: Executor | None = None,
        clock: Clock | None = None,
        rules: FillRules | None = None,
        max_fills: int = Limits().max_fills,
        attempts: int = 3,
        backoff_s: float = 0.1,
        max_blob_bytes: int = Limits().max_blob_bytes,
    ) -> None:
        self.upstream = upstream
        self.blobs = blobs
        # Hashing, writes and cache trimming: a pool of the fills' own (see the docstring).
        self.executor = executor or ThreadPoolExecutor(max_workers=4, thread_name_prefix="hetflow-fill")
        self.clock = clock or LoopClock()
        self.rules = rules or FillRules.from_limits(Limits())
        self.max_fills = max_fills
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_blob_bytes = max_blob_bytes
        self.stats = FetchStats()
        self._error = error  # an upstream non-200 as the client's response (proxy.upstream_error)
        self._slots: asyncio.Semaphore | None = None  # made on the loop that runs the fills
        self._fills: dict[str, _Fill] = {}

    def waiting(self, digest: str) -> int:
        """How many clients wait for the fill of ``digest`` now."""
        fill = self._fills.get(digest)
        return fill.waiters if fill is not None else 0

    async def fill(self, repo: str, digest: str, *, receive: Receive | None = None) -> Response | None:
        # By digest alone: the bytes are the same under every name (issue 23: one blob
        # under 20 names was fetched 20 times at once).
        fill = self._fills.get(digest)
        if fill is None:
            if self.blobs.size(digest) is not None:
                return None
            fill = self._begin(repo, digest)
        assert fill.task is not None
        fill.waiters += 1
        try:
            # shield: a client that hangs up does not cancel the fill the others wait on.
            return await _unless_gone(asyncio.shield(fill.task), receive)
        finally:
            fill.waiters -= 1
            if not fill.waiters:
                self._check(fill)  # nobody waits: a slow fill ends now, not at the next check

    async def aclose(self) -> None:
        """End every fill (nothing partial is kept) and the fill pool."""
        running = [t for f in self._fills.values() for t in (f.task, f.body) if t is not None]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)  # each removes its temporary file
        self.executor.shutdown(wait=False, cancel_futures=True)

    # --- one fill: its slot, its watch, its verdict -----------------------------------------

    def _begin(self, repo: str, digest: str) -> _Fill:
        fill = self._fills[digest] = _Fill(repo, digest, Progress(self.clock.now()))
        self.stats.fetches += 1
        fill.task = asyncio.ensure_future(self._run(fill))
        fill.task.add_done_callback(lambda _: self._forget(fill))
        return fill

    def _forget(self, fill: _Fill) -> None:
        if self._fills.get(fill.digest) is fill:
            del self._fills[fill.digest]

    async def _run(self, fill: _Fill) -> Response | None:
        fill.body = asyncio.ensure_future(self._in_slot(fill))
        watcher = asyncio.ensure_future(self._watch(fill))
        try:
            await asyncio.wait({fill.body})
        finally:
            watcher.cancel()
            fill.body.cancel()  # only does something when this task itself was cancelled
        if fill.verdict is not None:
            return self._ended(fill, fill.verdict)
        return fill.body.result()

    async def _in_slot(self, fill: _Fill) -> Response | None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_fills)
        async with self._slots:
            fill.progress.start(self.clock.now())
            return await self._fill(fill)

    async def _watch(self, fill: _Fill) -> None:
        while fill.verdict is None:
            await self.clock.sleep(self.rules.check_s)
            self._check(fill)

    def _check(self, fill: _Fill) -> None:
        """Judge ``fill`` now; a verdict cancels its reading (``fillwatch.judge``)."""
        if fill.verdict is not None or fill.body is None or fill.body.done():
            return
        verdict = judge(self.rules, fill.progress, self.clock.now(), fill.waiters)
        if verdict is None:
            return
        fill.verdict = verdict
        self._forget(fill)  # whoever asks from now on gets a fill of their own
        fill.body.cancel()
        if verdict.reason == "abandoned":
            self.stats.cancelled += 1
        else:
            self.stats.timed_out += 1
        log.warning("blob %s@%s: %s", fill.repo, fill.digest, self._explain(verdict))

    def _explain(self, verdict: Verdict) -> str:
        return explain(verdict, self.rules, self.upstream.base_url, self.max_fills)

    def _ended(self, fill: _Fill, verdict: Verdict) -> Response:
        detail = {
            "digest": fill.digest,
            "upstream": self.upstream.base_url,
            "received_bytes": verdict.received,
            "rate_bytes_per_s": round(verdict.rate, 3),
        }
        message = f"blob {fill.repo}@{fill.digest}: {self._explain(verdict)}; nothing kept, try again later"
        return error_response(503, ErrorCode.BLOB_UNKNOWN, message, detail)

    # --- attempts ----------------------------------------------------------------------------

    def _pause(self, attempt: int) -> float:
        return float(self.backoff_s * 2**attempt)

    async def _fill(self, fill: _Fill) -> Response | None:
        repo, digest = fill.repo, fill.digest
        last = _Failed(ErrorCode.UNAVAILABLE, "not tried")
        for attempt in range(self.attempts):
            if attempt:
                self.stats.refetches += 1
                await self.clock.sleep(self._pause(attempt - 1))
            try:
                answer = await self._attempt(fill)
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

    async def _open(self, fill: _Fill, start: int = 0) -> httpx.Response:
        self.stats.requests += 1
        try:
            return await self.upstream.open_blob(fill.repo, fill.digest, start=start)
        except RegistryError as err:
            raise _Failed(ErrorCode.UNAVAILABLE, str(err)) from err

    async def _attempt(self, fill: _Fill) -> Response | None:
        response = await self._open(fill)
        try:
            if response.status_code != 200:
                raw = await _read_error(response)
                if response.status_code in _TRANSIENT:
                    raise _Failed(ErrorCode.UNAVAILABLE, f"upstream answered {response.status_code}")
                return self._error(response.status_code, raw)
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > self.max_blob_bytes:
                raise _Refused(502, ErrorCode.SIZE_INVALID, self._too_big())
            try:
                sink = self.blobs.writer(fill.digest)
            except OSError as err:
                raise _disk(err) from err
            reader = _Reader(self, fill, response, sink)
            try:
                await reader.read()
            finally:
                response = reader.response  # a resume may have replaced it
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk(err) from err
            raise _Failed(ErrorCode.UNAVAILABLE, f"writing the body failed: {err!r}") from err
        except (httpx.HTTPError, RegistryError) as err:
            raise _Failed(ErrorCode.UNAVAILABLE, f"reading the body failed: {err!r}") from err
        finally:
            await response.aclose()
        return None

    def _too_big(self) -> str:
        return f"larger than {self.max_blob_bytes} bytes (limits.max_blob_bytes); not cached"


def _disk(err: OSError) -> _Refused:
    return _Refused(507, ErrorCode.UNAVAILABLE, f"the proxy's blob cache cannot store it: {err.strerror}")


async def _unless_gone(answer: asyncio.Future[Response | None], receive: Receive | None) -> Response | None:
    """``answer``, unless the client hangs up first (then a response nobody will read)."""
    if receive is None:
        return await answer
    gone = asyncio.ensure_future(until_disconnect(receive))
    either: set[asyncio.Future[Any]] = {answer, gone}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answer.done():
        return answer.result()
    answer.cancel()  # the shield only: the fill goes on for whoever else waits
    return error_response(503, ErrorCode.UNAVAILABLE, "the client left")


class _Reader:
    """One attempt's body: read on the event loop, continued across dropped connections
    (at most ``attempts - 1`` requests for the rest), hashed and written a chunk at a time
    in the fetcher's pool, committed only when it hashes to its digest."""

    def __init__(self, fetcher: BlobFetcher, fill: _Fill, response: httpx.Response, sink: BlobWriter) -> None:
        self.fetcher = fetcher
        self.fill = fill
        self.response = response
        self.sink = sink
        self.hasher = new_hasher(fill.digest)
        self.last: asyncio.Future[None] | None = None  # the latest hop to the pool

    async def read(self) -> None:
        try:
            await self._read()
        finally:
            # The temporary file goes before anyone hears of the failure; a hop still
            # writing to it (the read failed or was cancelled meanwhile) finishes first.
            last = self.last
            if last is not None and not last.done():
                last.add_done_callback(self._discard)  # should this wait be cancelled too
                await asyncio.wait({last})
            self.sink.discard()  # nothing after a commit

    def _discard(self, hop: asyncio.Future[None]) -> None:
        if not hop.cancelled():
            hop.exception()  # retrieved: the failure that matters was raised already
        self.sink.discard()

    def _write(self, data: bytes) -> None:
        self.hasher.update(data)
        self.sink.write(data)

    async def _hop(self, job: Callable[[], None]) -> None:
        """Run ``job`` in the pool after the hop before it (order is the hash's)."""
        if self.last is not None:
            await asyncio.shield(self.last)
        self.last = asyncio.get_running_loop().run_in_executor(self.fetcher.executor, job)

    async def _read(self) -> None:
        fetcher, fill = self.fetcher, self.fill
        offset = 0  # bytes of the body received so far
        skip = 0  # bytes of the current response already received before (an upstream without Range)
        breaks = 0
        pending: list[bytes] = []
        size = 0
        while True:
            try:
                async for chunk in self.response.aiter_bytes():
                    if skip:
                        dropped = min(skip, len(chunk))
                        skip -= dropped
                        chunk = chunk[dropped:]
                        if not chunk:
                            continue
                    offset += len(chunk)
                    fill.progress.received += len(chunk)
                    if offset > fetcher.max_blob_bytes:
                        raise _Refused(502, ErrorCode.SIZE_INVALID, fetcher._too_big())
                    pending.append(chunk)
                    size += len(chunk)
                    if size >= _CHUNK:
                        await self._hop(_joined(self._write, pending))
                        pending, size = [], 0
                if skip:
                    raise httpx.RemoteProtocolError(f"the body ended {skip} bytes before where it broke before")
                break
            except httpx.TransportError as err:  # ReadError, ReadTimeout, RemoteProtocolError: it went
                await self.response.aclose()
                breaks += 1
                if breaks >= fetcher.attempts:
                    raise
                log.warning("blob %s@%s broke off after %d bytes (%r); resuming", fill.repo, fill.digest, offset, err)
                fetcher.stats.resumes += 1
                await fetcher.clock.sleep(fetcher._pause(breaks - 1))
                self.response = await fetcher._open(fill, start=offset)
                skip = _resumed(self.response, offset)
        if pending:
            await self._hop(_joined(self._write, pending))
        if self.last is not None:
            await asyncio.shield(self.last)
        algorithm = fill.digest.split(":", 1)[0]
        actual = f"{algorithm}:{self.hasher.hexdigest()}"
        if actual != fill.digest:
            raise _Failed(ErrorCode.DIGEST_INVALID, f"the body hashes to {actual}; not kept")
        await self._hop(self.sink.commit)
        assert self.last is not None
        await asyncio.shield(self.last)


def _joined(write: Callable[[bytes], None], parts: list[bytes]) -> Callable[[], None]:
    data = b"".join(parts)
    return lambda: write(data)


def _resumed(response: httpx.Response, offset: int) -> int:
    """How many leading bytes of a resumed response to skip; raises if it is no body."""
    if response.status_code == 206:
        # RFC 9110 14.4: Content-Range: bytes first-last/complete
        if not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            raise httpx.RemoteProtocolError(f"asked for bytes {offset}-, got {response.headers.get('content-range')}")
        return 0
    if response.status_code == 200:
        return offset  # Range ignored (allowed, RFC 9110 14.2): the whole body again
    raise httpx.RemoteProtocolError(f"resuming at byte {offset}: upstream answered {response.status_code}")


async def _read_error(response: httpx.Response, limit: int = _ERROR_LIMIT) -> bytes:
    """At most ``limit`` bytes of an error body."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]
