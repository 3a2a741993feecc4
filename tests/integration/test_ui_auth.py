"""`hetflow ui` bound to a non-loopback address with --token, as a real subprocess: every
route (the page, its static files, each API path, the event and log streams, the actions)
answers 401 without the token or with a wrong one (same length, other lengths), and answers
with the token as a header or as ?token=."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hetflow.state import Store
from tests.integration.uikit import ROOT, Dashboard, dashboard, non_loopback_ip, synthetic_run

pytestmark = pytest.mark.integration

TOKEN = "Tok3n-" + "q" * 26
WRONG = [
    None,
    "Tok3n-" + "r" * 26,
    "Tok3n-" + "q" * 25,
    TOKEN + "q",
    "x",
    TOKEN.upper(),
]  # missing; same length; others
WORKFLOW = """apiVersion: hetflow/v1
name: chain
steps:
  a: {image: "localhost/x:1", command: [sh, -c, "echo a"]}
  b: {image: "localhost/x:1", command: [sh, -c, "echo b"], needs: [a]}
"""
RUN = "auth0001"
GETS = [
    ("/", "text/html"),
    ("/static/app.js", "javascript"),
    ("/static/app.css", "text/css"),
    ("/static/vendor/dagre.min.js", "javascript"),
    ("/api/config", "json"),
    ("/api/runs?limit=5", "json"),
    ("/api/tes/tasks?limit=5", "json"),
    (f"/api/runs/{RUN}", "json"),
    (f"/api/runs/{RUN}/events?after=0", "text/event-stream"),
    (f"/api/runs/{RUN}/gantt.svg", "image/svg+xml"),
    (f"/api/runs/{RUN}/steps/a/log", "json"),
    (f"/api/runs/{RUN}/steps/a/log/stream", "text/event-stream"),
    ("/api/nodes", "json"),
    ("/api/clusters", "json"),
    ("/api/files", "json"),
    ("/api/plan?workflow=examples/circuit/workflow.yaml&cluster=examples/clusters/hetero-16.yaml", "json"),
    ("/api/pareto?workflow=examples/circuit/workflow.yaml&catalog=examples/clusters/catalog.yaml", "json"),
]
POSTS = [f"/api/runs/{RUN}/stop", f"/api/runs/{RUN}/resume", f"/api/runs/{RUN}/steps/a/retry"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    home = tmp_path_factory.mktemp("auth") / "home"
    home.mkdir()
    store = Store(home / "state.db")
    synthetic_run(store, home, RUN, name="chain", steps=["a", "b"], workflow_yaml=WORKFLOW)
    store.close()
    # every path is tried with several wrong tokens from this one address: more than the
    # default wrong tokens a minute (test_ui_limits.py holds that limit)
    args = ("--token", TOKEN, "--actions", "--root", str(ROOT), "--wrong-tokens", "100000")
    with dashboard(home, *args, host=non_loopback_ip()) as server:
        yield server


def call(ui: Dashboard, method: str, path: str, token: str | None, *, query: bool = False) -> httpx.Response:
    headers = {} if token is None or query else {"Authorization": f"Bearer {token}"}
    if query and token is not None:
        path += ("&" if "?" in path else "?") + f"token={token}"
    return httpx.request(method, ui.base + path, headers=headers, timeout=60)


def assert_refused(answer: httpx.Response, what: str) -> None:
    assert answer.status_code == 401, (what, answer.status_code, answer.text[:200])
    assert answer.headers["www-authenticate"].startswith("Bearer"), what
    assert answer.json()["error"], what


@pytest.mark.parametrize(("path", "kind"), GETS, ids=[p for p, _ in GETS])
def test_every_get_needs_the_token(ui: Dashboard, path: str, kind: str) -> None:
    assert ui.host not in ("127.0.0.1", "::1", "localhost")
    for token in WRONG:
        assert_refused(call(ui, "GET", path, token), f"GET {path} token={token!r}")
        if token:
            assert_refused(call(ui, "GET", path, token, query=True), f"GET {path}?token={token!r}")
    basic = httpx.get(ui.base + path, headers={"Authorization": f"Basic {TOKEN}"}, timeout=60)
    assert_refused(basic, f"GET {path} with the token under another scheme")
    for query in (False, True):
        answer = call(ui, "GET", path, TOKEN, query=query)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
        assert kind in answer.headers["content-type"], (path, answer.headers["content-type"])
    if "event-stream" in kind:
        assert "event: end" in answer.text  # the run is over: the stream ends


@pytest.mark.parametrize("path", POSTS)
def test_every_action_needs_the_token(ui: Dashboard, path: str) -> None:
    for token in WRONG:
        assert_refused(call(ui, "POST", path, token), f"POST {path} token={token!r}")
    # with the token the action runs the CLI: on a finished run it says why it did nothing (400)
    answer = call(ui, "POST", path, TOKEN)
    assert answer.status_code in (200, 400), (path, answer.status_code, answer.text)
    body = answer.json()
    assert body.get("ok") is True or "hetflow " in body["error"], body


def test_the_url_printed_carries_the_token(ui: Dashboard) -> None:
    assert f"http://{ui.host}:{ui.port}/?token={TOKEN}" in Path(ui.log).read_text()


def test_every_route_of_the_app_is_in_the_lists_above(tmp_path: Path) -> None:
    """A route added to the dashboard without adding it here would go unchecked: fail instead."""
    from starlette.routing import Mount, Route

    from hetflow.ui import UiConfig, create_app

    Store(tmp_path / "state.db").close()
    app = create_app(UiConfig(store_path=tmp_path / "state.db", root=ROOT).checked())
    routes = {r.path for r in app.routes if isinstance(r, Route)} | {
        r.path + "/" for r in app.routes if isinstance(r, Mount)
    }

    def template(path: str) -> str:
        path = path.split("?")[0].replace(f"/api/runs/{RUN}", "/api/runs/{run_id}")
        path = path.replace("/steps/a/", "/steps/{step}/")
        return "/static/" if path.startswith("/static/") else path

    assert {template(p) for p, _ in GETS} | {template(p) for p in POSTS} == routes


HARDENED = ("x-frame-options", "x-content-type-options", "referrer-policy", "cross-origin-resource-policy")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "cross-site"}, 403),
        ({"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "same-site"}, 403),
        ({"Authorization": f"Bearer {TOKEN}", "Host": "127.0.0.1:8901, evil.com"}, 400),
        ({"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "same-origin"}, 200),
    ],
    ids=["401", "cross-site", "same-site", "two-hosts", "same-origin"],
)
def test_refusals_and_answers_carry_the_hardening_headers(ui: Dashboard, headers: dict[str, str], status: int) -> None:
    answer = httpx.get(f"{ui.base}/api/runs/{RUN}/steps/a/log?offset=0", headers=headers, timeout=60)
    assert answer.status_code == status, answer.text[:200]
    assert all(h in answer.headers for h in HARDENED), answer.headers
    assert answer.headers["cross-origin-resource-policy"] == "same-origin"
    assert "default-src 'self'" in answer.headers["content-security-policy"]


def test_only_the_pages_boot_script_answers_without_the_token(ui: Dashboard) -> None:
    boot = httpx.get(f"{ui.base}/static/boot.js", timeout=60)
    assert boot.status_code == 200 and "sessionStorage" in boot.text
    assert_refused(httpx.get(f"{ui.base}/static/app.js", timeout=60), "app.js without the token")
