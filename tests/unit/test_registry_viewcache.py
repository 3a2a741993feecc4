"""What the proxy keeps per index and machine type (issue 38): the answer only, bounded in
bytes with the least recently asked for out first; one match per view however many ask;
a big document matched in a worker process, a small one in a thread; views kept in memory
within a byte budget too, the rest read back from the disk."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hetflow.images import OCI_INDEX, OCI_MANIFEST, BadDocumentError, digest_of, parse_index, resolve
from hetflow.inventory import profile_node
from hetflow.registry.cache.store import FilteredStore, View
from hetflow.registry.matching.offload import Offload
from hetflow.registry.matching.viewcache import ViewCache
from hetflow.registry.matching.views import REASON_CHARS, REASONS_SHOWN, Filtered, NoBuildFits, filter_index

T = TypeVar("T")
NODE = profile_node("x86-64-v2")  # no GPU: every entry below is refused


def gpu_index(entries: int, title: str = "") -> bytes:
    """An index of ``entries`` sm_90 builds, each with a ``title`` annotation."""
    manifests = [
        {
            "mediaType": OCI_MANIFEST,
            "digest": f"sha256:{i:064x}",
            "size": 100 + i,
            "platform": {"architecture": "amd64", "os": "linux", "features": ["gpu:sm_90"]},
            "annotations": {"org.opencontainers.image.title": title or f"build {i}"},
        }
        for i in range(entries)
    ]
    return json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}).encode()


class Counting(Offload):
    """Runs in this thread and counts the documents it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.release = asyncio.Event()

    async def run(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        self.calls += 1
        await self.release.wait()
        return fn(*args)


@pytest.mark.parametrize(
    ("entries", "title", "listed", "more"),
    [
        pytest.param(3, "", 3, None, id="few-entries-all-listed"),
        pytest.param(REASONS_SHOWN, "", REASONS_SHOWN, None, id="exactly-the-shown"),
        pytest.param(7_500, "", REASONS_SHOWN, "... and 7480 more", id="many-entries-counted"),
        pytest.param(2, "t" * 5_000, 2, None, id="long-reasons-cut"),
    ],
)
def test_nothing_fits_keeps_a_bounded_answer(entries: int, title: str, listed: int, more: str | None) -> None:
    got = filter_index(gpu_index(entries, title), NODE)
    assert isinstance(got, NoBuildFits)
    reasons = list(got.reasons)
    if more is not None:
        assert reasons.pop() == more
    assert len(reasons) == listed
    assert all("sm_90 build needs a GPU" in r and len(r) <= REASON_CHARS for r in reasons)
    assert got.nbytes <= (REASONS_SHOWN + 1) * REASON_CHARS


def test_explain_with_a_limit_describes_that_many_and_counts_the_rest() -> None:
    resolution = resolve(parse_index(gpu_index(30)), NODE)
    assert len(resolution.explain()) == 31
    lines = resolution.explain(limit=5)
    assert len(lines) == 7 and lines[0] == resolution.explain()[0] and lines[-1].strip() == "... and 25 more"


def _answer(n: int) -> NoBuildFits:
    return NoBuildFits((f"reason {n} " + "x" * 488,))  # 500 bytes, 1012 with the overhead


def test_views_are_kept_within_the_byte_budget_least_recently_asked_first_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import hetflow.registry.matching.viewcache as module

    monkeypatch.setattr(module, "filter_index", lambda body, node: _answer(len(body)))
    offload = Counting()
    offload.release.set()
    cache = ViewCache(3_100, offload)  # three answers of ~1 KB fit

    async def ask(n: int) -> Any:
        return await cache.view(f"sha256:{n}", b"{}", "hw", NODE)

    async def scenario() -> None:
        for n in (1, 2, 3):
            await ask(n)
        await ask(1)  # 1 is now the most recent: 2 goes first
        await ask(4)
        assert offload.calls == 4 and len(cache) == 3 and cache.kept_bytes <= 3_100
        await ask(1)
        await ask(3)
        assert offload.calls == 4  # still kept
        await ask(2)
        assert offload.calls == 5  # evicted, matched again

    asyncio.run(scenario())


def test_an_answer_bigger_than_the_budget_is_given_not_kept() -> None:
    offload = Counting()
    offload.release.set()
    cache = ViewCache(600, offload)

    async def scenario() -> None:
        first = await cache.view("sha256:a", gpu_index(50), "hw", NODE)
        assert isinstance(first, NoBuildFits) and len(cache) == 0 and cache.kept_bytes == 0

    asyncio.run(scenario())


def test_concurrent_requests_for_one_view_share_one_match_and_a_leaver_does_not_cancel_it() -> None:
    offload = Counting()
    cache = ViewCache(1 << 20, offload)
    body = gpu_index(3)

    async def scenario() -> None:
        waiters = [asyncio.create_task(cache.view("sha256:x", body, "hw", NODE)) for _ in range(10)]
        await asyncio.sleep(0)
        waiters[0].cancel()  # a client that left
        await asyncio.sleep(0)
        offload.release.set()
        done = await asyncio.gather(*waiters[1:])
        assert offload.calls == 1
        assert all(isinstance(d, NoBuildFits) and d == done[0] for d in done)
        assert len(cache) == 1

    asyncio.run(scenario())


def test_a_document_that_is_no_index_is_an_error_and_not_kept() -> None:
    offload = Counting()
    offload.release.set()
    cache = ViewCache(1 << 20, offload)

    async def scenario() -> None:
        with pytest.raises(BadDocumentError):
            await cache.view("sha256:y", b'{"schemaVersion": 2, "manifests": 7}', "hw", NODE)
        assert len(cache) == 0

    asyncio.run(scenario())


def test_a_big_document_runs_in_a_worker_process_and_a_small_one_here() -> None:
    offload = Offload(inline_bytes=100)

    async def scenario() -> tuple[int, int, Filtered | NoBuildFits]:
        small = await offload.run(10, os.getpid)
        big = await offload.run(1000, os.getpid)
        view = await offload.run(10_000, filter_index, gpu_index(40), NODE)
        return small, big, view

    try:
        small, big, view = asyncio.run(scenario())
    finally:
        offload.close()
    assert small == os.getpid() and big != os.getpid()
    assert isinstance(view, NoBuildFits) and view.reasons[-1] == "... and 20 more"


def test_a_worker_error_comes_back_as_itself_and_a_dead_worker_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    import hetflow.registry.matching.offload as module

    monkeypatch.setattr(module, "TASKS_PER_WORKER", 2)
    offload = Offload(inline_bytes=0)

    async def scenario() -> list[int]:
        with pytest.raises(BadDocumentError):
            await offload.run(1, filter_index, b"not an index", NODE)
        pids = [await offload.run(1, os.getpid) for _ in range(3)]
        with pytest.raises(module.WorkerDied):
            await offload.run(1, os._exit, 3)  # dies, is replaced, dies again: refused
        pids.append(await offload.run(1, os.getpid))
        return pids

    try:
        pids = asyncio.run(scenario())
        workers = list(offload._idle)  # what close() must end
    finally:
        offload.close()
    # the error and the first pid: one worker's two tasks; then a fresh one; after the deaths, another
    assert pids[0] != pids[1] and pids[1] == pids[2] and pids[3] not in pids[:3]
    assert workers and all(w.proc.poll() is not None for w in workers)


def test_the_view_store_keeps_only_its_most_recent_views_in_memory(tmp_path: Path) -> None:
    store = FilteredStore(tmp_path, memo_bytes=3_000)
    bodies = [bytes([65 + i]) * 1_000 for i in range(10)]
    digests = [store.put(digest_of(b), b, OCI_INDEX, View("lab/app", "sha256:src", "t")).digest for b in bodies]
    assert store.get(digests[0]) is not None  # from the disk: it is out of memory, not lost
    for digest in (digests[0], digests[-1]):  # the first just read back, and the last put
        (tmp_path / digest.removeprefix("sha256:")).unlink()
    assert store.get(digests[-1]) is not None and store.get(digests[0]) is not None  # both in memory
    (tmp_path / digests[5].removeprefix("sha256:")).unlink()
    assert store.get(digests[5]) is None  # pushed out of memory by the newer ones: gone with its file
