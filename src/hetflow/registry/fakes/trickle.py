"""A trickling upstream for tests and the bench: a fake registry served over HTTP on
loopback, sending the bodies of chosen blobs a few bytes at a time.

    upstream = TrickleUpstream(fake.handle, trickle={digest, ...}, every_s=1.0)
    url = upstream.start()      # http://127.0.0.1:PORT, served from a daemon thread
    upstream.counts()           # {"started": n, "open": n, "closed_by_peer": n}
    upstream.stop()

Every request is answered by ``handle`` (``FakeRegistry.handle``, or a transport's handler
around it); the body of a GET of a blob in ``trickle`` goes out ``step`` bytes every
``every_s`` seconds (issue 38: an upstream sending one byte every 20 s held one of the
proxy's worker threads per fill, and 34 such fills starved every cached blob).  ``open``
counts the trickling bodies being sent now; one whose client (the proxy) closes the
connection is ``closed_by_peer``.  ``GET /_trickle`` answers the counts as JSON, for a test
that holds the upstream in another process (``hetflow.registry.fakes.fakeproxy --trickle``).

HTTP/1.1 with keep-alive and Content-Length bodies: what httpx speaks to it.  Real sockets,
so what the proxy does with a slow peer (its connection pool, its timeouts, closing the
connection of a fill it gave up) is what a slow registry would see.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable

import httpx

__all__ = ["TrickleUpstream"]

_HEAD_LIMIT = 64 * 1024


class TrickleUpstream:
    def __init__(
        self,
        handle: Callable[[httpx.Request], httpx.Response],
        *,
        trickle: Iterable[str] = (),
        every_s: float = 1.0,
        step: int = 1,
    ) -> None:
        self.handle = handle
        self.trickle = frozenset(trickle)
        self.every_s = every_s
        self.step = step
        self.url = ""
        self._counts = {"started": 0, "open": 0, "closed_by_peer": 0}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def _count(self, key: str, by: int = 1) -> None:
        with self._lock:
            self._counts[key] += by

    def start(self) -> str:
        """Serve on a free loopback port from a daemon thread; returns the base URL."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True, name="trickle-upstream")
        self._thread.start()
        if not ready.wait(20):
            raise RuntimeError("the trickling upstream did not start")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def _run(self, ready: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, limit=_HEAD_LIMIT))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for writer in list(self._writers):  # each connection's task then ends by itself
                writer.close()
            pending = asyncio.all_tasks(loop)
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = [_header(line) for line in lines[1:] if ":" in line]
                if not await self._answer(method, target, headers, reader, writer):
                    return
        except ConnectionError:
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; False when the connection is done."""
        if target == "/_trickle":
            response = httpx.Response(200, json=self.counts())
        else:
            response = self.handle(httpx.Request(method, f"http://upstream.test{target}", headers=headers))
        body = response.read()
        slow = method == "GET" and target.rsplit("/", 1)[-1] in self.trickle and response.status_code in (200, 206)
        sent = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in ("transfer-encoding",)]
        if method != "HEAD":
            sent = [(k, v) for k, v in sent if k.lower() != "content-length"] + [("content-length", str(len(body)))]
        if slow:
            sent.append(("connection", "close"))
        status = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"
        writer.write((status + "".join(f"{k}: {v}\r\n" for k, v in sent) + "\r\n").encode("latin-1"))
        if method == "HEAD":
            await writer.drain()
            return True
        if not slow:
            writer.write(body)
            await writer.drain()
            return True
        await self._trickle(body, reader, writer)
        return False

    async def _trickle(self, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._count("started")
        self._count("open")
        gone = asyncio.ensure_future(reader.read(1))  # b"" once the peer closes the connection
        try:
            for start in range(0, len(body), self.step):
                writer.write(body[start : start + self.step])
                await writer.drain()
                if start + self.step >= len(body):
                    break  # all sent: the peer closing now is the end of a whole body
                done, _ = await asyncio.wait({gone}, timeout=self.every_s)
                if done:
                    self._count("closed_by_peer")
                    return
        except ConnectionError:
            self._count("closed_by_peer")
        finally:
            gone.cancel()
            self._count("open", -1)


def _header(line: str) -> tuple[str, str]:
    name, _, value = line.partition(":")
    return name.strip(), value.strip()
