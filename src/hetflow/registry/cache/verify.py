"""Send content only when it hashes to the digest that names it.

Two pieces (upstream bodies are hashed as they are filled into the cache, by
``hetflow.registry.cache.fetch``):

``FileChunks`` is the cached blob's reader: each chunk is read and hashed in one hop to
the executor, and the next is read only when the client took the last, so a slow or
stalled reader holds an open file and at most two chunks, never a worker thread (issue
23: with a thread per blob read, 40 stalled clients of a cached blob froze all blob
traffic behind the pool's 32 threads).

``VerifiedBody`` is the ASGI response over such chunks (blobs are served from the
cache, so what it catches is a file damaged on disk after it was stored).  It holds the last chunk back
until the digest is known, so a client never receives a complete body whose digest
is wrong:

* a body of at most ``buffer_limit`` bytes is read in full before anything is sent;
  on a mismatch the client gets a clean ``502`` with an OCI ``DIGEST_INVALID`` error;
* a longer body streams, less its last chunk; on a mismatch the response ends short of
  its ``Content-Length`` (or without the final chunk of a chunked body) and the
  server closes the connection (uvicorn does so when an app returns with its response
  incomplete), which every HTTP client reports as a failed download.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import IO, Protocol

import httpx
from starlette.types import Message, Receive, Scope, Send

from hetflow.registry.cache.store import new_hasher
from hetflow.registry.errors import ErrorCode, error_body

__all__ = ["Chunks", "FileChunks", "VerifiedBody"]

log = logging.getLogger("hetflow.registry")


class Chunks(Protocol):
    """What VerifiedBody sends: chunks, then whether they hashed to ``digest``."""

    digest: str
    actual: str | None

    @property
    def matched(self) -> bool: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...


class FileChunks:
    """A cached file in ``chunk``-byte reads, each read and hashed in one executor hop;
    no thread waits between chunks (see the module's docstring)."""

    def __init__(self, path: Path, digest: str, executor: Executor, *, chunk: int = 64 * 1024) -> None:
        self.digest = digest
        self.actual: str | None = None
        self._path = path
        self._executor = executor
        self._chunk = chunk

    @property
    def matched(self) -> bool:
        return self.actual == self.digest

    async def __aiter__(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        hasher = new_hasher(self.digest)

        def step(f: IO[bytes]) -> bytes:
            data = f.read(self._chunk)
            hasher.update(data)
            return data

        f = await loop.run_in_executor(self._executor, self._path.open, "rb")
        try:
            while data := await loop.run_in_executor(self._executor, step, f):
                yield data
            self.actual = f"{self.digest.split(':', 1)[0]}:{hasher.hexdigest()}"
        finally:
            f.close()


class _Gone(Exception):
    """The client disconnected mid-response."""


class VerifiedBody:
    """An ASGI app that sends ``chunks`` as the body of a ``status`` response, verified
    against their digest.  ``headers`` should carry ``Content-Length`` when it is
    known; ``on_mismatch`` runs (once) when the body hashes wrong."""

    def __init__(
        self,
        chunks: Chunks,
        *,
        headers: Mapping[str, str],
        status: int = 200,
        buffer_limit: int = 8 * 1024 * 1024,
        what: str = "blob",
        on_mismatch: Callable[[str], None] | None = None,
    ) -> None:
        self.chunks = chunks
        self.headers = dict(headers)
        self.status = status
        self.buffer_limit = buffer_limit
        self.what = what
        self.on_mismatch = on_mismatch

    def _raw_headers(self, headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
        return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    def _mismatch(self) -> str:
        message = f"{self.what}: {self.chunks.digest} hashes to {self.chunks.actual}; not passed on"
        log.error("%s", message)
        if self.on_mismatch is not None:
            self.on_mismatch(str(self.chunks.actual))
        return message

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks = aiter(self.chunks)
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        async def guarded(message: Message) -> None:
            # uvicorn drops what is sent after the client left, silently: stop reading
            # instead of reading the rest of the file for nobody.
            if gone.is_set():
                raise _Gone
            await send(message)

        watcher = asyncio.ensure_future(watch())
        try:
            await self._send(guarded, chunks)
        except _Gone:
            log.info("%s %s: the client left before the end", self.what, self.chunks.digest)
        finally:
            watcher.cancel()
            await chunks.aclose()  # type: ignore[attr-defined]  # an async generator: stops the reader

    async def _error(self, send: Send, code: str, message: str) -> None:
        body = error_body(code, message, {"digest": self.chunks.digest})
        headers = {"content-type": "application/json", "content-length": str(len(body))}
        await send({"type": "http.response.start", "status": 502, "headers": self._raw_headers(headers)})
        await send({"type": "http.response.body", "body": body})

    async def _send(self, send: Send, chunks: AsyncIterator[bytes]) -> None:
        buffered: list[bytes] = []
        size = 0
        try:
            async for chunk in chunks:
                buffered.append(chunk)
                size += len(chunk)
                if size > self.buffer_limit:
                    await self._stream(send, chunks, buffered)
                    return
        except (OSError, httpx.HTTPError) as err:  # the upstream or the disk broke off before we answered
            log.error("%s %s: reading failed: %r", self.what, self.chunks.digest, err)
            await self._error(send, ErrorCode.UNAVAILABLE, f"{self.what}: reading {self.chunks.digest} failed: {err}")
            return
        if not self.chunks.matched:
            await self._error(send, ErrorCode.DIGEST_INVALID, self._mismatch())
            return
        headers = {**self.headers, "content-length": str(size)}
        await send({"type": "http.response.start", "status": self.status, "headers": self._raw_headers(headers)})
        await send({"type": "http.response.body", "body": b"".join(buffered)})

    async def _stream(self, send: Send, chunks: AsyncIterator[bytes], buffered: list[bytes]) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self._raw_headers(self.headers)})
        held = buffered.pop()
        # One chunk per send: each waits for the client to drain (uvicorn's flow control),
        # so a stalled reader holds about two chunks, not the whole buffer at once.
        while buffered:
            await send({"type": "http.response.body", "body": buffered.pop(0), "more_body": True})
        try:
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": held, "more_body": True})
                held = chunk
        except (OSError, httpx.HTTPError) as err:
            log.error("%s %s: reading failed after the headers went out: %r", self.what, self.chunks.digest, err)
            return  # incomplete: the server cuts the connection
        if not self.chunks.matched:
            self._mismatch()
            return  # the response stays incomplete: the server cuts the connection
        await send({"type": "http.response.body", "body": held, "more_body": False})
