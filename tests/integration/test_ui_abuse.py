"""`hetflow ui` on loopback (127.0.0.1 only) under the load an exposed dashboard met in the
issue 23 probe, bounded in count and time: a 100+ MB log read by three clients at once (each
answer capped, the server's peak RSS bounded), a 30 MB line with no newline followed by a log
stream (read once, not again every half second), and the limit on event streams."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hetflow.state import Store
from tests.integration.uikit import Dashboard, dashboard, synthetic_run, wait_until

pytestmark = pytest.mark.integration

LOG_BYTES = 110 * 2**20  # the log three clients read at once
CAP = 2**20  # the dashboard's bytes of log per answer (streams.MAX_LOG_BYTES)
PEAK_RSS = 400 * 2**20  # the server's peak resident memory through it all (it was about 2 GB)
LINE = b"2026-01-01T00:00:00.000000000Z stdout F "


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    home = tmp_path_factory.mktemp("abuse") / "home"
    home.mkdir()
    store = Store(home / "state.db")
    synthetic_run(store, home, "big00000", name="big", steps=["a"])
    synthetic_run(store, home, "long0000", name="long", steps=["a"], state="running")
    store.close()
    line = LINE + b"x" * 1000 + b"\n"
    with (home / "runs" / "big00000" / "logs" / "a.1.log").open("wb") as f:
        block = line * 1024
        for _ in range(LOG_BYTES // len(block) + 1):
            f.write(block)
    (home / "runs" / "long0000" / "logs" / "a.1.log").write_bytes(LINE + b"q" * (30 * 2**20))  # no newline
    with dashboard(home) as server:
        yield server


def _status(pid: int, key: str) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith(key + ":"):
            return int(row.split()[1]) * 1024  # kB
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def _read_bytes(pid: int) -> int:
    return next(int(r.split()[1]) for r in Path(f"/proc/{pid}/io").read_text().splitlines() if r.startswith("rchar:"))


def test_three_clients_reading_a_110_mb_log_get_capped_answers_and_memory_stays_bounded(ui: Dashboard) -> None:
    assert ui.host == "127.0.0.1"
    sizes: list[int] = []
    errors: list[str] = []

    def client(query: str) -> None:
        try:
            answer = httpx.get(f"{ui.base}/api/runs/big00000/steps/a/log{query}", timeout=120)
            assert answer.status_code == 200, answer.text[:200]
            data = answer.json()
            assert data["lines"] and 0 < data["offset"] <= LOG_BYTES + 2 * CAP
            sizes.append(len(answer.content))
        except Exception as exc:  # reported below, with the others
            errors.append(repr(exc))

    for _ in range(2):  # twice three at once: offset 0 (the probe's), the tail, an offset deep inside
        threads = [threading.Thread(target=client, args=(q,)) for q in ("?offset=0", "", f"?offset={50 * 2**20}")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
    assert errors == [] and len(sizes) == 6
    assert max(sizes) < 1.2 * CAP  # each answer capped (it was 130 MB)
    assert _status(ui.proc.pid, "VmHWM") < PEAK_RSS  # peak RSS of the `hetflow ui` process


def test_a_30_mb_line_with_no_newline_is_read_once_by_a_stream_not_every_poll(ui: Dashboard) -> None:
    pid = ui.proc.pid
    with httpx.stream("GET", f"{ui.base}/api/runs/long0000/steps/a/log/stream?offset=0", timeout=60) as answer:
        assert answer.status_code == 200
        lines = answer.iter_lines()
        first = next(ln for ln in lines if ln.startswith("data:"))
        assert '"cut":true' in first
        before = _read_bytes(pid)
        # about six polls of the log (one each 0.5 s); each used to read the whole 30 MB line again
        time.sleep(3)
        assert _read_bytes(pid) - before < 8 * CAP


def test_event_streams_beyond_the_limit_are_503_and_free_again_once_closed(ui: Dashboard) -> None:
    url = f"{ui.base}/api/runs/long0000/events"
    # four client addresses, 16 streams each (the most one address may hold): the 64 in all
    clients = [
        httpx.Client(timeout=60, transport=httpx.HTTPTransport(local_address=f"127.0.0.{n}")) for n in range(2, 6)
    ]
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=80)) as c:
        open_streams = []
        try:
            for i in range(64):
                s = clients[i // 16].stream("GET", url)
                answer = s.__enter__()
                open_streams.append(s)
                assert answer.status_code == 200
            assert c.get(url).status_code == 503
        finally:
            for s in open_streams:
                s.__exit__(None, None, None)
            for client in clients:
                client.close()

        def free() -> bool:
            with c.stream("GET", url) as answer:
                return answer.status_code == 200

        wait_until(free, 60, "a stream slot free again")
