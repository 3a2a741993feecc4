"""`hetflow ui` as a real subprocess, and what one client or one step can do to it (issue 38's
lower findings): the processes its stop/resume buttons start get no token, one client address
holds a bounded share of the event streams, wrong tokens from one address are rate-limited,
and a step whose output is one unfinished line shows that line."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.uikit import (
    Dashboard,
    browser_missing,
    chromium,
    dashboard,
    rendered,
    screenshot,
    synthetic_run,
    wait_until,
)

pytestmark = pytest.mark.integration

TOKEN = "T0ken-" + "z" * 26
STREAMS_PER_CLIENT = 16  # UiConfig.max_streams_per_client's default
WRONG_TOKENS = 10  # UiConfig.max_wrong_tokens's default (per address, per minute)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


LONG = f"""
apiVersion: hetflow/v1
name: uitoken
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "sleep 300"]
"""


def test_the_processes_the_action_buttons_start_do_not_inherit_the_token(hf: Hetflow, tmp_path: Path) -> None:
    # Before issue 38: `hetflow resume --detach` started by the Resume button, and the run's
    # executor it leaves running, carried HETFLOW_UI_TOKEN in their environment.
    run_id = hf("run", write(tmp_path, LONG), "--detach").stdout.strip()  # a detached run prints its id
    try:
        env = {**hf.env, "HETFLOW_UI_TOKEN": TOKEN}
        with dashboard(hf.home, "--actions", env=env) as ui:
            ui.token = TOKEN
            headers = {"Authorization": f"Bearer {TOKEN}"}
            hf.wait_for(lambda: hf.step_states(run_id)["a"] == "running", 120)
            stopped = httpx.post(f"{ui.base}/api/runs/{run_id}/stop", headers=headers, timeout=120)
            assert stopped.status_code == 200, stopped.text
            resumed = httpx.post(f"{ui.base}/api/runs/{run_id}/resume", headers=headers, timeout=120)
            assert resumed.status_code == 200, resumed.text
            hf.wait_for(lambda: (shown := hf.show(run_id))["state"] == "running" and bool(shown["pid"]), 120)
            executor = int(hf.show(run_id)["pid"])
            env_seen = _environ(executor)
            assert env_seen.get("HETFLOW_HOME") == str(hf.home)  # it is the resumed run's executor
            assert "HETFLOW_UI_TOKEN" not in env_seen, "the run's executor holds the dashboard's token"
    finally:
        hf("stop", run_id, "--grace", "0", check=False)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("limits") / "home"
    home.mkdir()
    store = Store(home / "state.db")
    synthetic_run(store, home, "live0001", name="live", steps=["a"], state="running")
    store.close()
    return home


def _open_stream(ui: Dashboard, path: str, source: str, token: str | None = None) -> tuple[socket.socket, bytes]:
    """A GET of an event stream from ``source``, kept open; the socket and its status line."""
    host, port = ui.base.removeprefix("http://").split(":")
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(30)
    s.connect((host, int(port)))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return s, head


@contextmanager
def _closing(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def _answer(s: socket.socket, head: bytes) -> tuple[dict[str, str], bytes]:
    """The headers and the whole body of a short answer whose head ``_open_stream`` read."""
    top, _, body = head.partition(b"\r\n\r\n")
    headers = dict(
        (k.strip().lower(), v.strip()) for k, _, v in (h.decode().partition(":") for h in top.split(b"\r\n")[1:])
    )
    while len(body) < int(headers.get("content-length", "0")):
        body += s.recv(4096)
    return headers, body


def _new_stream_status(ui: Dashboard, source: str) -> bytes:
    s, head = _open_stream(ui, "/api/runs/live0001/events", source)
    s.close()
    return head.split(b"\r\n", 1)[0]


def test_one_client_address_cannot_hold_every_event_stream(home: Path) -> None:
    # Before issue 38: one address opened all 64 streams and every other client got 503.
    with dashboard(home) as ui, _closing([]) as socks:
        answers = []
        for _ in range(64):
            s, head = _open_stream(ui, "/api/runs/live0001/events", "127.0.0.2")
            socks.append(s)
            answers.append(head.split(b"\r\n", 1)[0])
            if answers[-1] != b"HTTP/1.1 200 OK":
                headers, body = _answer(s, head)
                assert int(headers["retry-after"]) > 0 and "per client address" in json.loads(body)["error"]
        assert answers.count(b"HTTP/1.1 200 OK") == STREAMS_PER_CLIENT, answers
        assert set(answers[STREAMS_PER_CLIENT:]) == {b"HTTP/1.1 429 Too Many Requests"}, set(answers)
        for source in ("127.0.0.1", "127.0.0.3"):  # other clients are served
            s, head = _open_stream(ui, "/api/runs/live0001/events", source)
            socks.append(s)
            assert head.startswith(b"HTTP/1.1 200"), head
        for s in socks[:STREAMS_PER_CLIENT]:  # the address's streams close: it may open more
            s.close()
        wait_until(
            lambda: _new_stream_status(ui, "127.0.0.2") == b"HTTP/1.1 200 OK",
            30,
            "a stream from 127.0.0.2 once its others closed",
        )


def _get(ui: Dashboard, token: str, source: str) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=30) as client:
        return client.get(f"{ui.base}/api/config", headers={"Authorization": f"Bearer {token}"})


def test_wrong_tokens_from_one_address_are_rate_limited(home: Path) -> None:
    # Before issue 38: an address could try tokens as fast as the server answered.
    with dashboard(home, "--token", TOKEN) as ui:
        wrong = "W" + TOKEN[1:]
        statuses = [_get(ui, wrong, "127.0.0.2").status_code for _ in range(WRONG_TOKENS)]
        assert statuses == [401] * WRONG_TOKENS
        over = _get(ui, wrong, "127.0.0.2")
        assert over.status_code == 429, over.text
        assert 0 < int(over.headers["retry-after"]) <= 60
        assert "wrong tokens" in over.json()["error"]
        assert _get(ui, TOKEN, "127.0.0.2").status_code == 429  # no more answers to that address for now
        assert _get(ui, TOKEN, "127.0.0.1").status_code == 200  # others are served
        assert _get(ui, wrong, "127.0.0.1").status_code == 401


PROGRESS = f"""
apiVersion: hetflow/v1
name: progress
steps:
  bar:
    image: {BUSYBOX}
    command: [sh, -c, "echo starting; printf 'progress 45%%'; sleep 300"]
"""


def test_a_steps_unfinished_last_line_is_shown(hf: Hetflow, tmp_path: Path) -> None:
    # Before issue 38: output with no newline yet (one long line, a progress bar) left the
    # log empty until the line ended, which it may never do.
    run_id = hf("run", write(tmp_path, PROGRESS), "--detach").stdout.strip()  # a detached run prints its id
    try:
        log = Path(hf.show(run_id)["workdir"]) / "logs" / "bar.1.log"
        hf.wait_for(lambda: log.exists() and b" P progress 45%" in log.read_bytes(), 120)
        with dashboard(hf.home) as ui:
            got = ui.get(f"/api/runs/{run_id}/steps/bar/log")
            assert [(line["text"], line.get("partial", False)) for line in got["lines"]] == [
                ("starting", False),
                ("progress 45%", True),
            ]
            assert not got["done"]
            # the stream from the answer's offset sends the unfinished line again (the page
            # replaces its partial line), never a line twice as finished
            events = _sse_events(ui, f"/api/runs/{run_id}/steps/bar/log/stream?offset={got['offset']}")
            assert events and events[0] == {"stream": "stdout", "text": "progress 45%", "partial": True}
    finally:
        hf("stop", run_id, "--grace", "0", check=False)


def _sse_events(ui: Dashboard, path: str, wanted: int = 1) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    deadline = time.monotonic() + 60
    with httpx.stream("GET", ui.base + path, timeout=30) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                found.append(json.loads(line[6:]))
            if len(found) >= wanted or time.monotonic() > deadline:
                break
    return found


# Each part of the line waits for a file the test puts in the attempt's /out (on the host:
# attempts/bar/1/out), so the page is looked at between the parts, whatever the machine's load.
GROWING = f"""
apiVersion: hetflow/v1
name: growing
steps:
  bar:
    image: {BUSYBOX}
    command:
      - sh
      - -c
      - >-
        echo starting; printf 'progress 1';
        until [ -e /out/go ]; do sleep 0.2; done; printf 2;
        until [ -e /out/go2 ]; do sleep 0.2; done; echo '%'; echo done
"""


def test_the_page_shows_an_unfinished_line_and_replaces_it_as_it_grows(hf: Hetflow, tmp_path: Path) -> None:
    why = browser_missing()
    if why:
        pytest.skip(why)
    run_id = hf("run", write(tmp_path, GROWING), "--detach").stdout.strip()  # a detached run prints its id
    out = Path(hf.show(run_id)["workdir"]) / "attempts" / "bar" / "1" / "out"
    driver = chromium()
    try:
        log = out.parents[3] / "logs" / "bar.1.log"
        hf.wait_for(lambda: log.exists() and b" P progress 1" in log.read_bytes(), 120)
        with dashboard(hf.home, env=hf.env) as ui:
            driver.get(ui.url(f"#/runs/{run_id}"))
            rendered(driver, "run")
            wait_until(
                lambda: driver.find_element("css selector", '#steps-table tbody tr[data-step="bar"]'), 30
            ).click()

            def shown() -> tuple[str, list[str]]:
                pre = driver.find_element("css selector", "pre#log")
                partial = [str(e.text) for e in pre.find_elements("css selector", ".partial")]
                return str(pre.text), partial

            wait_until(lambda: shown() == ("starting\nprogress 1", ["progress 1"]), 60, "the unfinished line")
            screenshot(driver, "log-partial-line")
            (out / "go").touch()
            wait_until(lambda: shown() == ("starting\nprogress 12", ["progress 12"]), 60, "the line, grown, once")
            (out / "go2").touch()
            wait_until(lambda: shown() == ("starting\nprogress 12%\ndone", []), 60, "the line finished, once")
        hf.wait_for(lambda: hf.show(run_id)["state"] == "succeeded", 120)
    finally:
        driver.quit()
        hf("stop", run_id, "--grace", "0", check=False)


def _raw(ui: Dashboard, path: str, headers: list[bytes], source: str = "127.0.0.1") -> tuple[int, bytes]:
    """GET ``path`` from ``source`` with header lines as given (bytes: httpx refuses non-ASCII)."""
    host, port = ui.base.removeprefix("http://").split(":")
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n".encode()
    request += b"".join(h + b"\r\n" for h in headers) + b"\r\n"
    with socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0)) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture(scope="module")
def token_ui(home: Path) -> Iterator[Dashboard]:
    """One dashboard with ``--token`` for the malformed-authorization cases: each case asks
    from an address of its own, so no case's wrong token counts against another's."""
    with dashboard(home, "--token", TOKEN) as ui:
        yield ui


@pytest.mark.parametrize(
    ("path", "header", "named", "source"),
    [
        ("/api/config", b"Authorization: Bearer \xff\xfe", "the token is wrong", "127.0.0.21"),
        ("/api/config", b"Authorization: Basic \xfc\xfc", "not 'Bearer TOKEN'", "127.0.0.22"),
        (
            "/api/config",
            b"Authorization: Basic " + base64.b64encode(b"u:" + TOKEN.encode()),
            "not 'Bearer TOKEN'",
            "127.0.0.23",
        ),
        ("/api/config", b"Authorization: \xff", "not 'Bearer TOKEN'", "127.0.0.24"),
        ("/api/config?token=%FF%FE", b"X-Nothing: 1", "the token is wrong", "127.0.0.25"),
        ("/api/runs/live0001/events", b"Authorization: Bearer", "the token is wrong", "127.0.0.26"),
    ],
    ids=["non-ascii-bearer", "non-ascii-basic", "basic", "no-scheme", "non-utf8-query", "empty-bearer"],
)
def test_every_malformed_authorization_is_a_401_naming_what_is_wrong(
    token_ui: Dashboard, path: str, header: bytes, named: str, source: str
) -> None:
    status, body = _raw(token_ui, path, [header], source)
    assert status == 401, (status, body)
    assert named in json.loads(body)["error"], body
