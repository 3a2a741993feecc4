"""The proxy in front of a faulty upstream (``hetflow.registry.fakes.faults``): no pull ever
succeeds with wrong bytes, every failure is an OCI error after bounded retries, a dropped
body resumes with Range, and concurrent pulls of one blob fetch it upstream once."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from hetflow.registry import FakeRegistry, MachineTypeDecl, Settings, create_app
from hetflow.registry.cache.fetch import FetchStats
from hetflow.registry.fakes.faults import FaultyUpstream

REPO = "lab/app"
TYPE = "x86-64-v2"


@dataclass
class Env:
    faulty: FaultyUpstream
    app: Starlette
    state: Path

    @property
    def stats(self) -> FetchStats:
        stats: FetchStats = self.app.state.registry.proxy.fetcher.stats
        return stats

    def cached(self) -> list[Path]:
        return [p for p in (self.state / "cache").rglob("*") if p.is_file()]

    def pull(self, digests: list[str], concurrency: int = 8) -> list[httpx.Response]:
        """GET each blob through the proxy (``concurrency`` at a time), bodies read in full."""

        async def run() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy.test") as client:
                token = (self.state / "tokens" / TYPE).read_text().strip()
                bearer = (await client.get("/token", auth=(TYPE, token))).json()["token"]
                headers = {"Authorization": f"Bearer {bearer}"}
                gate = asyncio.Semaphore(concurrency)

                async def one(digest: str) -> httpx.Response:
                    async with gate:
                        return await client.get(f"/v2/{REPO}/blobs/{digest}", headers=headers)

                return list(await asyncio.gather(*(one(d) for d in digests)))

        return asyncio.run(run())


def _env(tmp_path: Path, faulty: FaultyUpstream) -> Env:
    settings = Settings(
        upstream="http://upstream.test", state_dir=tmp_path / "state", machine_types=(MachineTypeDecl(profile=TYPE),)
    )
    app = create_app(settings, transport=faulty.transport())
    app.state.registry.proxy.fetcher.backoff_s = 0.0  # the retries, not their pauses, are under test
    return Env(faulty, app, tmp_path / "state")


def _fake(blobs: int, seed: int = 0, **changes: object) -> tuple[FakeRegistry, list[str]]:
    fake = FakeRegistry(**changes)  # type: ignore[arg-type]
    fake.push_builds(REPO, "v1", {"generic": []})
    rng = random.Random(seed)
    return fake, [fake.add_blob(rng.randbytes(rng.randrange(1, 96 * 1024))) for _ in range(blobs)]


@pytest.fixture
def one_blob(tmp_path: Path) -> Iterator[tuple[Path, FakeRegistry, str]]:
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    yield tmp_path, fake, fake.add_blob(random.Random(1).randbytes(300 * 1024 + 5))  # several 64 KiB reads


def _sha(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


# --- one exact story per row ------------------------------------------------------------------

STORIES = [
    # script of blob GETs, upstream honours Range, expected status, (refetches, resumes), Range GETs
    pytest.param(["drop"], True, 200, (0, 1), 1, id="drop-resumed-with-range"),
    pytest.param(["drop"], False, 200, (0, 1), 1, id="drop-refetched-and-skipped-without-range"),
    pytest.param(["drop", "drop"], True, 200, (0, 2), 2, id="two-drops-two-resumes"),
    pytest.param(["corrupt"], True, 200, (1, 0), 0, id="corrupt-then-refetched"),
    pytest.param(["drop", "corrupt"], True, 200, (1, 1), 1, id="dropped-then-a-corrupt-rest-refetched"),
    pytest.param(["503"], True, 200, (1, 0), 0, id="transient-503-retried"),
    pytest.param(["corrupt"] * 3, True, 502, (2, 0), 0, id="corrupt-every-attempt-is-digest-invalid"),
    pytest.param(["drop"] * 9, True, 502, (2, 6), 6, id="dropped-every-attempt-is-unavailable"),
    pytest.param(["404"], True, 404, (0, 0), 0, id="not-found-is-not-retried"),
]


@pytest.mark.parametrize(("script", "ranges", "status", "retries", "range_gets"), STORIES)
def test_faults_are_retried_then_a_clear_error(
    one_blob: tuple[Path, FakeRegistry, str],
    script: list[str],
    ranges: bool,
    status: int,
    retries: tuple[int, int],
    range_gets: int,
) -> None:
    tmp_path, fake, digest = one_blob
    fake.ranges = ranges
    env = _env(tmp_path, FaultyUpstream(fake, script=list(script)))
    (got,) = env.pull([digest])
    assert got.status_code == status, got.text
    assert (env.stats.refetches, env.stats.resumes) == retries
    assert env.faulty.ranges_asked == (range_gets if ranges else env.faulty.ranges_asked)
    if status == 200:
        assert _sha(got.content) == digest
        assert len(env.cached()) == 1
    else:
        (error,) = got.json()["errors"]
        assert error["code"] == {502: ("DIGEST_INVALID" if "corrupt" in script else "UNAVAILABLE")}.get(
            status, "UNAVAILABLE"
        )
        assert env.cached() == []  # neither a bad blob nor a partial file


# --- single-flight ------------------------------------------------------------------------------


@pytest.mark.parametrize("clients", [2, 16, 64])
def test_concurrent_pulls_of_one_blob_fetch_it_upstream_once(tmp_path: Path, clients: int) -> None:
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    digest = fake.add_blob(os.urandom(2 * 1024 * 1024 + 3))
    env = _env(tmp_path, FaultyUpstream(fake))
    got = env.pull([digest] * clients, concurrency=clients)
    assert [r.status_code for r in got] == [200] * clients
    assert {_sha(r.content) for r in got} == {digest}
    assert env.faulty.blob_gets[digest] == 1
    assert env.stats.fetches == 1


def test_concurrent_pulls_share_the_retries_too(tmp_path: Path) -> None:
    fake, (digest,) = _fake(1)
    env = _env(tmp_path, FaultyUpstream(fake, script=["corrupt", "drop"]))
    got = env.pull([digest] * 8, concurrency=8)
    assert {r.status_code for r in got} == {200}
    assert env.faulty.blob_gets[digest] == 3  # corrupt, dropped, resumed: once for all eight


# --- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tally:
    pulls: int
    ok: int
    wrong: int  # 200 with bytes that do not hash to the digest: must stay 0
    clear_errors: int  # an OCI error body with DIGEST_INVALID or UNAVAILABLE
    other: int  # anything else: must stay 0


def _tally(digests: list[str], got: list[httpx.Response]) -> Tally:
    ok = wrong = clear = other = 0
    for digest, response in zip(digests, got, strict=True):
        if response.status_code == 200:
            ok += _sha(response.content) == digest
            wrong += _sha(response.content) != digest
        elif response.status_code == 502 and response.json()["errors"][0]["code"] in ("DIGEST_INVALID", "UNAVAILABLE"):
            clear += 1
        else:
            other += 1
    return Tally(len(got), ok, wrong, clear, other)


PULLS = int(os.environ.get("HETFLOW_FAULT_PULLS", "500"))


@pytest.mark.parametrize(
    ("corrupt", "drop", "all_succeed"),
    [
        pytest.param(0.01, 0.01, True, id="1pct-corrupt-1pct-drop"),
        pytest.param(0.5, 0.2, False, id="50pct-corrupt-20pct-drop"),
    ],
)
def test_a_faulty_upstream_never_yields_wrong_bytes(
    tmp_path: Path, corrupt: float, drop: float, all_succeed: bool
) -> None:
    fake, digests = _fake(PULLS, seed=12)
    faulty = FaultyUpstream(fake, corrupt=corrupt, drop=drop, seed=12)
    env = _env(tmp_path, faulty)
    tally = _tally(digests, env.pull(digests))
    print(f"{tally} {faulty.injected} {env.stats} upstream_gets={sum(faulty.blob_gets.values())}")
    assert tally.wrong == 0 and tally.other == 0
    assert tally.ok + tally.clear_errors == tally.pulls
    assert faulty.injected.corrupted > 0 and faulty.injected.dropped > 0
    assert env.stats.refetches + env.stats.resumes >= faulty.injected.corrupted  # each fault was retried
    if all_succeed:
        assert tally.ok == tally.pulls  # three attempts outlast 1% faults
    else:
        assert tally.clear_errors > 0  # the harsh upstream wins sometimes: a clear error then
    assert len(env.cached()) == tally.ok  # only verified blobs, no partial files
