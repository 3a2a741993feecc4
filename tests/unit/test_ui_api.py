"""The dashboard's JSON API through starlette's TestClient, over a synthetic store made with
the Store API in a tmp dir (no podman, no browser): paging and filters, one run's shape and
DAG, the event stream of a finished run, the log tail, 404s, 403 for actions when off, the
token gate, paths outside --root, and a read-only store that refuses writes."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from hetflow.state import Store
from hetflow.ui import UiConfig, create_app, finite
from tests.integration.uikit import ROOT, synthetic_run

WORKFLOW = """apiVersion: hetflow/v1
name: chain
steps:
  a:
    image: localhost/x:1
    command: [sh, -c, "echo a"]
    env: {SECRET: hunter2}
  b:
    image: localhost/x:1
    command: [sh, -c, "echo b"]
    needs: [a]
  c:
    image: localhost/x:1
    command: [sh, -c, "echo c"]
    needs: [b]
"""
TOKEN = "t" * 32


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "state.db")
    for i in range(7):
        state = ("succeeded", "failed", "stopped")[i % 3]
        synthetic_run(store, home, f"run{i:04d}", name=f"wf-{'alpha' if i < 4 else 'beta'}", steps=["a"], state=state)
    synthetic_run(store, home, "chain000", name="chain", steps=["a", "b", "c"], workflow_yaml=WORKFLOW, log_lines=700)
    store.close()
    return home


def client(home: Path, **kw: object) -> TestClient:
    config = UiConfig(store_path=home / "state.db", root=ROOT, **kw).checked()  # type: ignore[arg-type]
    return TestClient(create_app(config), base_url="http://127.0.0.1:8786")  # the Host a loopback dashboard answers


def test_runs_are_paged_newest_first_and_filtered(home: Path) -> None:
    c = client(home)
    page = c.get("/api/runs?limit=3&offset=0").json()
    assert page["total"] == 8 and page["limit"] == 3 and len(page["runs"]) == 3
    assert [r["id"] for r in page["runs"]] == ["chain000", "run0006", "run0005"]
    rest = c.get("/api/runs?limit=3&offset=6").json()
    assert [r["id"] for r in rest["runs"]] == ["run0001", "run0000"]
    failed = c.get("/api/runs?state=failed").json()
    assert {r["id"] for r in failed["runs"]} == {"run0001", "run0004"} and failed["total"] == 2
    beta = c.get("/api/runs?name=beta").json()
    assert {r["id"] for r in beta["runs"]} == {"run0004", "run0005", "run0006"}
    chain = page["runs"][0]
    assert "steps" not in chain
    assert chain["steps_done"] == 3 and chain["steps_total"] == 3 and chain["progress"] == 1.0
    assert chain["counts"] == {"succeeded": 3} and chain["duration"] > 0 and chain["cost"] is None


@pytest.mark.parametrize(
    ("query", "names"),
    [("state=nope", "state='nope'"), ("limit=x", "limit='x'"), ("limit=0", "limit='0'"), ("offset=-1", "offset")],
)
def test_bad_run_queries_are_400s_naming_the_parameter(home: Path, query: str, names: str) -> None:
    answer = client(home).get(f"/api/runs?{query}")
    assert answer.status_code == 400
    assert names in answer.json()["error"]


def test_one_run_has_its_dag_edges_from_the_recorded_workflow_and_hides_env(home: Path) -> None:
    run = client(home).get("/api/runs/chain000").json()
    assert run["state"] == "succeeded" and run["backend"] == "local" and run["cursor"] > 0
    assert sorted(map(tuple, run["graph"]["edges"])) == [("a", "b"), ("b", "c")]
    assert [n["id"] for n in run["graph"]["nodes"]] == ["a", "b", "c"]
    a = next(s for s in run["steps"] if s["step"] == "a")
    assert a["image"].startswith("localhost/x@sha256:") and a["retries"] == 0 and a["replicas"] == 1
    assert a["env"] == {"SECRET": "***"}
    shown = client(home, show_env=True).get("/api/runs/chain000").json()
    assert next(s for s in shown["steps"] if s["step"] == "a")["env"] == {"SECRET": "hunter2"}


def test_a_finished_runs_event_stream_ends_with_end(home: Path) -> None:
    with client(home).stream("GET", "/api/runs/chain000/events?after=0") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        body = "".join(answer.iter_text())
    blocks = [b for b in body.split("\n\n") if b.strip()]
    assert blocks[-1].startswith("event: end") and '"state":"succeeded"' in blocks[-1]
    assert sum("event: step" in b for b in blocks) == 9  # launching, running, succeeded for a, b, c
    ids = [int(line[4:]) for b in blocks for line in b.splitlines() if line.startswith("id: ")]
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    with client(home).stream("GET", "/api/runs/chain000/events", headers={"Last-Event-ID": str(ids[-1])}) as later:
        assert [b for b in "".join(later.iter_text()).split("\n\n") if b.startswith("id:")] == []


def test_log_tail_is_the_last_500_lines_then_what_follows_an_offset(home: Path) -> None:
    c = client(home)
    tail = c.get("/api/runs/chain000/steps/b/log").json()
    assert len(tail["lines"]) == 500 and tail["done"] is True and tail["attempt"] == 1 and tail["rank"] == 0
    assert tail["lines"][-1] == {"stream": "stdout", "text": "b line 699"}
    assert c.get(f"/api/runs/chain000/steps/b/log?offset={tail['offset']}").json()["lines"] == []
    log = home / "runs" / "chain000" / "logs" / "b.1.log"
    with log.open("a") as f:
        f.write("2026-01-01T00:00:09.000000000Z stderr F one more\n")
    more = c.get(f"/api/runs/chain000/steps/b/log?offset={tail['offset']}").json()
    assert more["lines"] == [{"stream": "stderr", "text": "one more"}] and more["offset"] == log.stat().st_size


def test_log_stream_goes_on_from_an_offset_and_marks_where_to_resume(home: Path) -> None:
    """The page streams from the offset /log answered; a reconnect's Last-Event-ID (the
    offset after the last line sent) wins over it, so no line arrives twice."""
    c = client(home)
    tail = c.get("/api/runs/chain000/steps/b/log").json()
    log = home / "runs" / "chain000" / "logs" / "b.1.log"
    with log.open("a") as f:
        f.write("2026-01-01T00:00:09.000000000Z stdout F after the tail\n")

    def blocks(answer_text: str) -> list[str]:
        return [b for b in answer_text.split("\n\n") if b.startswith(("id:", "event: line"))]

    with c.stream("GET", f"/api/runs/chain000/steps/b/log/stream?offset={tail['offset']}") as answer:
        sent = blocks("".join(answer.iter_text()))
    assert len(sent) == 1 and '"text":"after the tail"' in sent[0]
    assert sent[0].startswith(f"id: {log.stat().st_size}\n")
    with c.stream(
        "GET", "/api/runs/chain000/steps/b/log/stream?offset=0", headers={"Last-Event-ID": str(log.stat().st_size)}
    ) as again:
        assert blocks("".join(again.iter_text())) == []
    assert c.get("/api/runs/chain000/steps/b/log/stream?offset=-3").status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/ffffffff",
        "/api/runs/chain000/steps/nope/log",
        "/api/runs/chain000/steps/a/log?attempt=9",
        "/api/runs/nope/gantt.svg",
        "/api/runs/nope/events",
    ],
)
def test_unknown_run_step_or_attempt_is_404(home: Path, path: str) -> None:
    answer = client(home).get(path)
    assert answer.status_code == 404 and answer.json()["error"]


@pytest.mark.parametrize(
    "path", ["/api/runs/chain000/stop", "/api/runs/chain000/resume", "/api/runs/chain000/steps/a/retry"]
)
def test_actions_are_403_when_off(home: Path, path: str) -> None:
    answer = client(home).post(path)
    assert answer.status_code == 403 and "--actions" in answer.json()["error"]


@pytest.mark.parametrize(
    "path", ["/", "/static/app.js", "/api/config", "/api/runs", "/api/runs/chain000", "/api/runs/chain000/gantt.svg"]
)
def test_the_token_is_checked_on_every_path(home: Path, path: str) -> None:
    c = client(home, host="0.0.0.0", token=TOKEN)
    for headers in ({}, {"Authorization": "Bearer " + "u" * 32}, {"Authorization": "Bearer short"}):
        answer = c.get(path, headers=headers)
        assert answer.status_code == 401, (path, headers)
        assert answer.headers["www-authenticate"].startswith("Bearer") and answer.json()["error"]
    assert c.get(path, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert c.get(path + ("&" if "?" in path else "?") + f"token={TOKEN}").status_code == 200


@pytest.mark.parametrize("rel", ["../etc/passwd", "../../../../etc/passwd", "/etc/passwd", "examples/nope.yaml"])
def test_plan_refuses_paths_outside_root(home: Path, rel: str) -> None:
    answer = client(home).get(f"/api/plan?workflow={rel}&cluster=examples/clusters/hetero-16.yaml")
    assert answer.status_code == 400 and "workflow=" in answer.json()["error"]


def test_a_loopback_dashboard_answers_only_to_its_loopback_host(home: Path) -> None:
    config = UiConfig(store_path=home / "state.db", root=ROOT).checked()
    rebound = TestClient(create_app(config), base_url="http://evil.example:8786")  # DNS rebinding
    assert rebound.get("/api/runs").status_code == 421


def test_finite_turns_infinities_into_null() -> None:
    data = {"a": math.inf, "b": [1.5, -math.inf, math.nan], "c": ({"d": 2},)}
    assert finite(data) == {"a": None, "b": [1.5, None, None], "c": [{"d": 2}]}


def test_the_dashboards_store_is_read_only(home: Path) -> None:
    store = Store(home / "state.db", read_only=True)
    try:
        assert store.run("chain000").state == "succeeded"
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only|attempt to write"):
            store.set_run("chain000", state="failed")
    finally:
        store.close()
    assert Store(home / "state.db").run("chain000").state == "succeeded"


def test_clusters_list_the_node_classes_of_live_cluster_runs_and_what_runs_there(tmp_path: Path) -> None:
    """A running Slurm run's stored plan names its node classes; its running attempt holds
    GPUs 0,1 of node gpu-a100-0.  Local runs and ended cluster runs are not listed."""
    from hetflow.execute import RunPlan
    from hetflow.plan import MachineClass

    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "state.db")
    classes = (
        MachineClass(name="cpu", count=4, cores=32, memory=128 << 30, price_per_hour=1.5),
        MachineClass(name="gpu-a100", count=2, cores=64, memory=512 << 30, gpus=8, gpu_model="A100", gpu_cc=(8, 0)),
    )
    plan = RunPlan(kind="cluster", planner="planned", classes=classes).to_json()
    synthetic_run(
        store,
        home,
        "slurm001",
        steps=["train"],
        state="running",
        backend="slurm",
        plan_json=plan,
        node="gpu-a100-0",
        gpus=(0, 1),
    )
    synthetic_run(store, home, "slurm002", steps=["x"], state="succeeded", backend="slurm", plan_json=plan)
    synthetic_run(store, home, "local001", steps=["x"], state="running")
    store.close()

    got = client(home).get("/api/clusters").json()

    assert [c["run_id"] for c in got] == ["slurm001"]
    assert got[0]["backend"] == "slurm" and got[0]["state"] == "running"
    assert [(k["name"], k["count"], k["gpus"], k["gpu_cc"]) for k in got[0]["classes"]] == [
        ("cpu", 4, 0, ""),
        ("gpu-a100", 2, 8, "8.0"),
    ]
    assert got[0]["busy"] == [
        {"node": "gpu-a100-0", "gpus": [0, 1], "run_id": "slurm001", "step": "train", "attempt": 1}
    ]
