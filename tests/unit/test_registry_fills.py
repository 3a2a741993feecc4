"""Upstream fills (issue 38), with an injected clock and an upstream the test feeds by hand:
concurrent pulls of one blob share one fill, each fill has a deadline and a minimum rate, a
fill nobody waits for any more is cancelled when it is slow, fills of distinct blobs are
bounded by their own slots, and serving a cached blob never waits for one.  No wall-clock
sleeps: time moves when the test advances ``ManualClock``; hashing runs inline."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import Message

from hetflow.errors import UsageError
from hetflow.registry import FakeRegistry, Limits, MachineTypeDecl, Settings, create_app, load_settings
from hetflow.registry.cache.fetch import BlobFetcher
from hetflow.registry.cache.fillwatch import FillRules, ManualClock
from hetflow.registry.cache.store import BlobStore
from hetflow.registry.cache.upstream import Upstream

UPSTREAM = "http://upstream.test"
REPO = "lab/app"
T = TypeVar("T")


class InlineExecutor(Executor):
    """Runs each job at once, in the caller: hashing and writes without threads or waits."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as err:  # handed to the awaiting side, as a pool does
            done.set_exception(err)
        return done


class Tap(httpx.AsyncByteStream):
    """A blob body the test sends by hand; ``closed`` once the proxy let go of it."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    def feed(self, data: bytes) -> None:
        self.queue.put_nowait(data)

    def end(self) -> None:
        self.queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (data := await self.queue.get()) is not None:
            yield data

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Blob:
    data: bytes
    digest: str
    taps: list[Tap] = field(default_factory=list)  # one per upstream GET

    @property
    def tap(self) -> Tap:
        return self.taps[-1]


def _blob(data: bytes) -> Blob:
    return Blob(data, "sha256:" + hashlib.sha256(data).hexdigest())


@dataclass
class Rig:
    fetcher: BlobFetcher
    clock: ManualClock
    store: BlobStore
    blobs: dict[str, Blob]
    gets: Counter[str]

    def files(self) -> list[Path]:
        return [p for p in self.store.root.rglob("*") if p.is_file()]


def _rig(tmp_path: Path, blobs: list[Blob], *, max_fills: int = 8, rules: dict[str, float] | None = None) -> Rig:
    by_digest = {b.digest: b for b in blobs}
    gets: Counter[str] = Counter()

    def handle(request: httpx.Request) -> httpx.Response:
        digest = request.url.path.rsplit("/", 1)[1]
        gets[digest] += 1
        tap = Tap()
        by_digest[digest].taps.append(tap)
        return httpx.Response(200, headers={"Content-Length": str(len(by_digest[digest].data))}, stream=tap)

    clock = ManualClock()
    store = BlobStore(tmp_path / "blobs")
    fetcher = BlobFetcher(
        Upstream(UPSTREAM, transport=httpx.MockTransport(handle)),
        store,
        executor=InlineExecutor(),
        clock=clock,
        rules=FillRules(**{"deadline_s": 600.0, "min_rate": 100.0, "window_s": 5.0, **(rules or {})}),
        max_fills=max_fills,
        backoff_s=0.0,
        error=lambda status, raw: Response(raw, status),
    )
    return Rig(fetcher, clock, store, by_digest, gets)


async def _settle(until: Callable[[], bool] = lambda: False, turns: int = 200) -> None:
    """Let the loop run ``turns`` rounds, or until ``until()``: in-memory work only."""
    for _ in range(turns):
        if until():
            return
        await asyncio.sleep(0)


class Client:
    """One client waiting for a fill; ``leave()`` is its connection closing."""

    def __init__(self, rig: Rig, digest: str, repo: str = REPO) -> None:
        self._gone = asyncio.Event()
        self._sent = False
        self.task = asyncio.ensure_future(rig.fetcher.fill(repo, digest, receive=self._receive))

    async def _receive(self) -> Message:
        if not self._sent:
            self._sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self._gone.set()


async def _tick(rig: Rig, seconds: int, each: Callable[[], None] = lambda: None) -> None:
    """``seconds`` one-second steps of the clock, ``each`` before every step."""
    for _ in range(seconds):
        each()
        await _settle()
        rig.clock.advance(1.0)
        await _settle()


def _run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def _error(response: Response | None) -> dict[str, Any]:
    assert response is not None
    body = json.loads(bytes(response.body))
    error: dict[str, Any] = body["errors"][0]
    return error


# --- one fill for everyone who asks ------------------------------------------------------


def test_concurrent_pulls_of_one_blob_share_one_fill_and_one_leaving_does_not_end_it(tmp_path: Path) -> None:
    blob = _blob(bytes(range(256)) * 40)

    async def test() -> None:
        rig = _rig(tmp_path, [blob])
        clients = [Client(rig, blob.digest, repo=f"lab/name{i}") for i in range(5)]
        await _settle(lambda: rig.fetcher.waiting(blob.digest) == 5)
        assert rig.fetcher.waiting(blob.digest) == 5
        clients[0].leave()
        await _settle(lambda: rig.fetcher.waiting(blob.digest) == 4)
        blob.tap.feed(blob.data)
        blob.tap.end()
        results = await asyncio.gather(*(c.task for c in clients[1:]))
        assert results == [None] * 4  # in the cache
        assert rig.gets[blob.digest] == 1 and rig.fetcher.stats.fetches == 1
        assert rig.store.size(blob.digest) == len(blob.data)
        assert rig.fetcher.waiting(blob.digest) == 0

    _run(test)


# --- deadline and minimum rate -----------------------------------------------------------

LIMITS = [
    # rules, bytes fed per second, seconds, the setting the 503 names (None: the fill completes)
    pytest.param({"deadline_s": 10.0, "min_rate": 0.0}, 1, 12, "upstream_total_timeout_s", id="deadline"),
    pytest.param({"min_rate": 100.0, "window_s": 5.0}, 10, 7, "upstream_min_rate_bytes_per_s", id="below-min-rate"),
    pytest.param({"min_rate": 100.0, "window_s": 5.0}, 1000, 7, None, id="above-min-rate-completes"),
]


@pytest.mark.parametrize(("rules", "per_second", "seconds", "named"), LIMITS)
def test_a_fill_past_its_deadline_or_below_its_minimum_rate_is_a_503_and_leaves_nothing(
    tmp_path: Path, rules: dict[str, float], per_second: int, seconds: int, named: str | None
) -> None:
    blob = _blob(b"x" * 6000)

    async def test() -> None:
        rig = _rig(tmp_path, [blob], rules=rules)
        client = Client(rig, blob.digest)
        await _settle(lambda: bool(blob.taps))
        sent = 0

        def feed() -> None:
            nonlocal sent
            if sent < len(blob.data) and not client.task.done():
                blob.tap.feed(blob.data[sent : sent + per_second])
                sent += per_second
                if sent >= len(blob.data):
                    blob.tap.end()

        await _tick(rig, seconds, feed)
        await _settle(client.task.done)
        answer = client.task.result()
        if named is None:
            assert answer is None and rig.store.size(blob.digest) == len(blob.data)
            return
        assert answer is not None and answer.status_code == 503
        error = _error(answer)
        assert error["code"] == "BLOB_UNKNOWN"
        assert UPSTREAM in error["message"] and named in error["message"] and "B/s" in error["message"]
        assert blob.tap.closed  # the upstream connection is let go
        assert rig.files() == []  # no blob, no .part file
        assert rig.fetcher.stats.timed_out == 1

    _run(test)


# --- abandoned fills ---------------------------------------------------------------------

ABANDONED = [
    # bytes per second while the clients wait, then they leave: cancelled, or kept going
    pytest.param(1, True, id="slow-and-abandoned-is-cancelled"),
    pytest.param(2000, False, id="fast-and-abandoned-goes-on-into-the-cache"),
]


@pytest.mark.parametrize(("per_second", "cancelled"), ABANDONED)
def test_an_abandoned_fill_is_cancelled_only_when_it_is_below_the_minimum_rate(
    tmp_path: Path, per_second: int, cancelled: bool
) -> None:
    blob = _blob(b"y" * 8000)

    async def test() -> None:
        rig = _rig(tmp_path, [blob], rules={"min_rate": 100.0, "window_s": 5.0})
        clients = [Client(rig, blob.digest), Client(rig, blob.digest)]
        await _settle(lambda: bool(blob.taps))
        await _tick(rig, 2, lambda: blob.tap.feed(blob.data[:per_second]))
        for client in clients:
            client.leave()
        await _settle(lambda: rig.fetcher.waiting(blob.digest) == 0)
        await _settle()
        assert blob.tap.closed == cancelled
        assert rig.fetcher.stats.cancelled == int(cancelled)
        if cancelled:
            assert rig.files() == []
            again = Client(rig, blob.digest)  # asked again: a fill of its own
            await _settle(lambda: len(blob.taps) == 2)
            assert rig.gets[blob.digest] == 2
            again.leave()
        else:
            rest = blob.data[2 * per_second :]
            blob.tap.feed(rest)
            blob.tap.end()
            await _settle(lambda: rig.store.size(blob.digest) is not None)
            assert rig.store.size(blob.digest) == len(blob.data)
        await rig.fetcher.aclose()

    _run(test)


# --- fill slots ----------------------------------------------------------------------------


def test_fills_of_distinct_blobs_wait_for_a_slot_and_a_queued_one_times_out_by_its_deadline(tmp_path: Path) -> None:
    blobs = [_blob(bytes([i]) * 500) for i in range(3)]

    async def test() -> None:
        rig = _rig(tmp_path, blobs, max_fills=1, rules={"deadline_s": 10.0, "min_rate": 0.0})
        first = Client(rig, blobs[0].digest)
        await _settle(lambda: bool(blobs[0].taps))
        second = Client(rig, blobs[1].digest)
        await _settle()
        assert rig.gets[blobs[1].digest] == 0  # no slot: not asked upstream yet
        blobs[0].tap.feed(blobs[0].data)
        blobs[0].tap.end()
        assert await first.task is None
        await _settle(lambda: bool(blobs[1].taps))
        assert rig.gets[blobs[1].digest] == 1  # the slot passed on
        third = Client(rig, blobs[2].digest)
        await _tick(rig, 11)
        await _settle(lambda: third.task.done() and second.task.done())
        error = _error(third.task.result())
        assert "limits.max_fills" in error["message"] and rig.gets[blobs[2].digest] == 0
        assert second.task.result() is not None  # its own deadline, too

    _run(test)


def test_a_queued_fill_nobody_waits_for_is_dropped_before_it_reaches_the_upstream(tmp_path: Path) -> None:
    blobs = [_blob(bytes([i]) * 500) for i in range(2)]

    async def test() -> None:
        rig = _rig(tmp_path, blobs, max_fills=1)
        Client(rig, blobs[0].digest)
        await _settle(lambda: bool(blobs[0].taps))
        queued = Client(rig, blobs[1].digest)
        await _settle()
        queued.leave()
        await _settle(lambda: rig.fetcher.stats.cancelled == 1)
        assert rig.fetcher.stats.cancelled == 1
        blobs[0].tap.feed(blobs[0].data)
        blobs[0].tap.end()
        await _settle(lambda: rig.store.size(blobs[0].digest) is not None)
        await _settle()
        assert rig.gets[blobs[1].digest] == 0
        await rig.fetcher.aclose()

    _run(test)


# --- serving never waits for a fill slot ---------------------------------------------------


class _Hangs(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        await asyncio.Event().wait()
        yield b""


def test_a_cached_blob_is_served_while_every_fill_slot_is_taken(tmp_path: Path) -> None:
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    cached = fake.add_blob(b"cached" * 100)
    stuck = [fake.add_blob(bytes([i]) * 100) for i in range(2)]
    real = fake.handle

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.rsplit("/", 1)[1] in stuck:
            return httpx.Response(200, headers={"Content-Length": "100"}, stream=_Hangs())
        return real(request)

    fake.handle = handle  # type: ignore[method-assign]
    settings = Settings(
        upstream=UPSTREAM,
        state_dir=tmp_path / "state",
        machine_types=(MachineTypeDecl(profile="x86-64-v2"),),
        limits=Limits(max_fills=1),
    )
    app = create_app(settings, transport=fake.transport())

    async def test() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
            token = (tmp_path / "state" / "tokens" / "x86-64-v2").read_text().strip()
            bearer = (await client.get("/token", auth=("x86-64-v2", token))).json()["token"]
            headers = {"Authorization": f"Bearer {bearer}"}
            path = f"/v2/{REPO}/blobs/"
            assert (await client.get(path + cached, headers=headers)).status_code == 200
            waiting = [asyncio.ensure_future(client.get(path + d, headers=headers)) for d in stuck]
            fetcher = app.state.registry.proxy.fetcher
            await _settle(lambda: all(fetcher.waiting(d) == 1 for d in stuck))
            got = await asyncio.wait_for(client.get(path + cached, headers=headers), timeout=30)
            assert got.status_code == 200 and got.content == b"cached" * 100
            assert not any(w.done() for w in waiting)
            for w in waiting:
                w.cancel()
            await app.state.registry.close()

    _run(test)


# --- settings ------------------------------------------------------------------------------

BAD = [
    pytest.param({"upstream_total_timeout_s": 0}, "upstream_total_timeout_s", id="zero-deadline"),
    pytest.param({"upstream_min_rate_bytes_per_s": -1}, "upstream_min_rate_bytes_per_s", id="negative-rate"),
    pytest.param({"upstream_rate_window_s": 0.5}, "upstream_rate_window_s", id="window-under-a-second"),
    pytest.param({"max_fills": 0}, "max_fills", id="no-fill-slots"),
]


@pytest.mark.parametrize(("limits", "field_name"), BAD)
def test_bad_fill_settings_are_refused_naming_the_field(
    tmp_path: Path, limits: dict[str, float], field_name: str
) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text(json.dumps({"upstream": UPSTREAM, "limits": limits}))
    with pytest.raises(UsageError, match=rf"{config}: limits\.{field_name}: "):
        load_settings(config)
    with pytest.raises(ValidationError):
        Limits.model_validate(limits)


def test_the_fill_defaults_are_minutes_not_an_hour() -> None:
    limits = Limits()
    assert 60 <= limits.upstream_total_timeout_s <= 1800
    assert limits.upstream_min_rate_bytes_per_s > 0 and limits.upstream_rate_window_s <= 120
    rules = FillRules.from_limits(limits)
    assert rules.deadline_s == limits.upstream_total_timeout_s
