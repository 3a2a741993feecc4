"""The dashboard exposed (issue 23): what another site's page, a bad Host, bad query
parameters, huge logs and many clients get.  Starlette's TestClient over a synthetic store."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from hetflow.config import SHARE
from hetflow.state import Store
from hetflow.ui import UiConfig, create_app
from hetflow.ui import streams as ui_streams
from hetflow.ui.planning import Planner
from hetflow.ui.views import Busy
from tests.integration.uikit import ROOT, synthetic_run

TOKEN = "t" * 32
LINE = "2026-01-01T00:00:00.000000000Z stdout F "
HARDENING = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-resource-policy": "same-origin",
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "state.db")
    synthetic_run(store, home, "done0000", name="done", steps=["a"], log_lines=20)
    synthetic_run(store, home, "live0000", name="live", steps=["a"], state="running", log_lines=1)
    store.close()
    return home


def client(home: Path, root: Path = ROOT, **kw: Any) -> TestClient:
    config = UiConfig(store_path=home / "state.db", root=root, **kw).checked()
    return TestClient(create_app(config), base_url="http://127.0.0.1:8786")


def log_file(home: Path, run: str) -> Path:
    return home / "runs" / run / "logs" / "a.1.log"


@pytest.mark.parametrize(
    ("token", "headers", "status"),
    [
        (None, {}, 200),
        (None, {"Host": "evil.com"}, 421),
        (None, {"Host": "127.0.0.1:8786, evil.com"}, 400),
        (None, {"Sec-Fetch-Site": "cross-site"}, 403),
        (TOKEN, {}, 401),
        (TOKEN, {"Authorization": "Bearer " + "x" * 32}, 401),
        (TOKEN, {"Authorization": "Bearer " + TOKEN}, 200),
    ],
    ids=["answer", "421", "400-host", "403-site", "401-none", "401-wrong", "token"],
)
def test_every_answer_the_gates_refusals_too_carries_the_hardening_headers(
    home: Path, token: str | None, headers: dict[str, str], status: int
) -> None:
    answer = client(home, token=token).get("/api/config", headers=headers)
    assert answer.status_code == status
    for name, value in HARDENING.items():
        assert answer.headers[name] == value
    assert "default-src 'self'" in answer.headers["content-security-policy"]
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    if status != 200:
        assert answer.json()["error"]


@pytest.mark.parametrize(
    ("site", "status"),
    [("cross-site", 403), ("same-site", 403), ("same-origin", 200), ("none", 200), (None, 200)],
    ids=["cross-site", "same-site", "same-origin", "typed-url", "no-header"],
)
def test_requests_led_by_another_sites_page_are_refused_before_any_work(
    home: Path, site: str | None, status: int
) -> None:
    headers = {} if site is None else {"Sec-Fetch-Site": site}
    # the log is the costly answer an <img src> on another page asked for
    answer = client(home).get("/api/runs/done0000/steps/a/log?offset=0", headers=headers)
    assert answer.status_code == status


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("127.0.0.1:8786", 200),
        ("127.0.0.1", 200),
        ("localhost:8786", 200),
        ("[::1]:8786", 200),
        ("127.0.0.1:8786, evil.com", 400),
        ("127.0.0.1:8786,evil.com", 400),
        ("::1", 400),
        ("127.0.0.1:99999", 400),
        ("127.0.0.1:80:80", 400),
        ("127.0.0.1 evil.com", 400),
        ("[127.0.0.1]:8786", 400),
        ("", 400),
        ("evil.com", 421),
        ("127.0.0.1.evil.com", 421),
    ],
)
def test_the_host_header_names_exactly_one_host(home: Path, host: str, status: int) -> None:
    assert client(home).get("/api/config", headers={"Host": host}).status_code == status


RUNS = "/api/runs"
LOG = "/api/runs/done0000/steps/a/log"
EVENTS = "/api/runs/done0000/events"
STREAM = "/api/runs/done0000/steps/a/log/stream"
BAD_NUMBERS = {"negative": "-1", "huge": "9" * 30, "non-numeric": "abc", "fraction": "1.5", "spaced": " 1"}
FUZZ = [
    *((RUNS, p, v, k) for p in ("limit", "offset") for k, v in BAD_NUMBERS.items()),
    (RUNS, "limit", "0", "zero"),
    (RUNS, "state", "nope", "unknown-enum"),
    (RUNS, "name", "\x00", "nul"),
    (RUNS, "name", "x" * 5000, "too-long"),
    *((LOG, p, v, k) for p in ("offset", "attempt", "rank") for k, v in BAD_NUMBERS.items()),
    (LOG, "attempt", "0", "zero"),
    *((EVENTS, "after", v, k) for k, v in BAD_NUMBERS.items()),
    *((STREAM, p, v, k) for p in ("offset", "attempt", "rank") for k, v in BAD_NUMBERS.items()),
    *(("/api/plan", p, v, k) for p in ("workflow", "cluster") for k, v in (("empty", ""), ("nul", "\x00"))),
    ("/api/plan", "objective", "fastest", "unknown-enum"),
    ("/api/plan", "objective", "\x00", "nul"),
    *(("/api/pareto", p, v, k) for p in ("workflow", "catalog") for k, v in (("empty", ""), ("nul", "\x00"))),
]


@pytest.mark.parametrize(
    ("path", "param", "value"),
    [f[:3] for f in FUZZ],
    ids=[f"{f[0].rsplit('/', 1)[-1]}-{f[1]}-{f[3]}" for f in FUZZ],
)
def test_every_bad_query_parameter_is_a_4xx_naming_it(home: Path, path: str, param: str, value: str) -> None:
    good = {
        "/api/plan": {"workflow": "examples/circuit/workflow.yaml", "cluster": "examples/clusters/hetero-16.yaml"},
        "/api/pareto": {"workflow": "examples/circuit/workflow.yaml", "catalog": "examples/clusters/catalog.yaml"},
    }.get(path, {})
    answer = client(home).get(path, params={**good, param: value})
    assert answer.status_code == 400, answer.text
    assert param in answer.json()["error"]


def _write_log(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{LINE}{t}\n" for t in lines))


def test_a_log_answer_reads_at_most_the_cap_and_says_where_to_go_on(home: Path) -> None:
    log = log_file(home, "done0000")
    _write_log(log, [f"{i:06d} " + "x" * 1000 for i in range(3000)])  # about 3 MiB
    c = client(home)
    offset, texts, answers = 0, [], 0
    while True:
        answer = c.get(LOG, params={"offset": offset})
        assert len(answer.content) < 1.1 * ui_streams.MAX_LOG_BYTES  # one capped body
        data = answer.json()
        if not data["lines"]:
            break
        texts += [ln["text"] for ln in data["lines"]]
        assert data["offset"] > offset
        offset, answers = data["offset"], answers + 1
    assert answers >= 3 and len(texts) == 3000 and texts[-1].startswith("002999 ")
    tail = c.get(LOG).json()  # no offset: the last lines, from the log's last MiB only
    assert len(tail["lines"]) == 500 and tail["lines"][-1]["text"].startswith("002999 ")


def test_a_line_longer_than_the_cap_comes_cut_and_marked_then_the_next_line(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    _write_log(log, ["y" * 5000, "next"])
    first, at = ui_streams.log_tail(log, 0, cap=1000)
    assert len(first) == 1 and first[0]["cut"] is True and "cut" in first[0]["text"] and at == 1000
    rest, at = ui_streams.log_tail(log, at, cap=1000)  # inside the cut line: skipped, a window at a time
    while not rest:
        rest, at = ui_streams.log_tail(log, at, cap=1000)
    assert rest == [{"stream": "stdout", "text": "next"}] and at == log.stat().st_size


def test_a_long_partial_group_is_cut_instead_of_being_read_again(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("".join(f"2026-01-01T00:00:00Z stdout P {'z' * 100}\n" for _ in range(50)))
    lines, at = ui_streams.log_tail(log, 0, cap=1000)
    assert lines and lines[-1]["cut"] is True and at > 0


def test_a_log_stream_reads_a_log_that_does_not_grow_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running step with a long line and no newline: the stream reads it once, then only
    when the file grows (it used to read the whole line again every half second)."""
    log = log_file(home, "live0000")
    log.write_bytes(LINE.encode() + b"q" * 200_000)  # no newline yet
    reads: list[int | None] = []
    real = ui_streams.log_tail

    def counted(path: Path, offset: int | None, cap: int = ui_streams.MAX_LOG_BYTES) -> Any:
        reads.append(offset)
        return real(path, offset, cap)

    monkeypatch.setattr(ui_streams, "log_tail", counted)
    monkeypatch.setattr(ui_streams, "POLL", 0.01)
    local, opened = threading.local(), [0]

    def open_store() -> Store:  # called once per poll; one connection per worker thread (as the app's Reader)
        opened[0] += 1
        if not hasattr(local, "store"):
            local.store = Store(home / "state.db", read_only=True)
        return local.store  # type: ignore[no-any-return]

    async def follow() -> None:
        stream = ui_streams.log_events(open_store, "live0000", "a", None, 0, 0)

        async def consume() -> None:
            async for _ in stream:
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            with anyio.fail_after(60):
                while opened[0] < 20:  # twenty polls of a log that does not change
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()

    anyio.run(follow)
    assert reads == [0]


def test_event_streams_beyond_the_cap_are_503(home: Path) -> None:
    c = client(home, max_streams=0)
    for path in (EVENTS, STREAM):
        answer = c.get(path)
        assert answer.status_code == 503 and "event streams" in answer.json()["error"]
    assert client(home, max_streams=1).get(EVENTS).status_code == 200  # one, and it closes (the run is over)


def test_planning_is_bounded_and_answers_are_cached_by_the_files(tmp_path: Path) -> None:
    wf, cl = tmp_path / "wf.yaml", tmp_path / "cl.yaml"
    wf.write_text("a"), cl.write_text("b")
    planner = Planner(tmp_path, limit=1)
    started, release = threading.Event(), threading.Event()
    computed: list[int] = []

    def slow() -> dict[str, Any]:
        started.set()
        release.wait(30)
        computed.append(1)
        return {"n": len(computed)}

    first: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: first.append(planner._answer(("k",), slow)))
    t.start()
    assert started.wait(30)
    with pytest.raises(Busy):  # the one slot is taken
        planner._answer(("other",), slow)
    release.set()
    t.join(30)
    assert first == [{"n": 1}]
    assert planner._answer(("k",), slow) == {"n": 1} and computed == [1]  # cached: not computed again


def test_planning_beyond_the_limit_is_a_503_through_the_api(home: Path) -> None:
    files = {"workflow": "examples/circuit/workflow.yaml", "cluster": "examples/clusters/hetero-16.yaml"}
    answer = client(home, max_planning=0).get("/api/plan", params=files)
    assert answer.status_code == 503 and answer.headers["retry-after"]


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ("include: [../outside/t.yaml]\n", "include"),
        ("data:\n  d: /etc/passwd\n", "data 'd'"),
        ("data:\n  d: ../outside/*.txt\n", "data 'd'"),
    ],
    ids=["include", "data-absolute", "data-glob"],
)
def test_a_workflow_under_root_cannot_make_the_dashboard_read_outside_it(
    home: Path, tmp_path: Path, extra: str, names: str
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (outside / "t.yaml").write_text("templates: {}\n")
    (outside / "x.txt").write_text("x")
    (root / "wf.yaml").write_text(
        "apiVersion: hetflow/v1\nname: w\n" + extra + "steps:\n  a:\n    image: localhost/x:1\n    command: [true]\n"
    )
    (root / "cl.yaml").write_text((ROOT / "examples/clusters/hetero-16.yaml").read_text())
    answer = client(home, root=root).get("/api/plan", params={"workflow": "wf.yaml", "cluster": "cl.yaml"})
    assert answer.status_code == 400, answer.text
    assert names in answer.json()["error"] and "outside --root" in answer.json()["error"]


@pytest.mark.parametrize("token", [None, TOKEN], ids=["loopback-bad-host", "token"])
def test_a_websocket_without_the_token_is_closed(home: Path, token: str | None) -> None:
    c = client(home, token=token)
    headers = {"Host": "evil.com"} if token is None else {}
    with pytest.raises(WebSocketDisconnect) as closed, c.websocket_connect("/ws", headers=headers):
        pass
    assert closed.value.code == 1008


def test_the_page_runs_no_inline_script_and_its_boot_script_needs_no_token(home: Path) -> None:
    page = (SHARE / "ui" / "index.html").read_text()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    assert scripts and all("src=" in attrs and not body.strip() for attrs, body in scripts)
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers either
    c = client(home, token=TOKEN)
    assert c.get("/static/boot.js").status_code == 200
    assert c.get("/static/app.js").status_code == 401 and c.get("/").status_code == 401
