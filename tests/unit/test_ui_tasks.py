"""The dashboard's TES tasks page (``/api/tes/tasks``) over a synthetic store: tasks newest
first with owner and state, the run each attempt became with the node and GPUs it ran on,
paging and the state filter, a bad state named, and a store no TES server wrote to."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from hetflow.state import Store
from hetflow.ui import UiConfig, create_app
from tests.integration.uikit import ROOT, synthetic_run


def client(home: Path) -> TestClient:
    config = UiConfig(store_path=home / "state.db", root=ROOT).checked()
    return TestClient(create_app(config), base_url="http://127.0.0.1:8786")


def test_tasks_beside_their_runs_with_owner_state_node_and_gpus(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "state.db")
    for i, owner in enumerate(["alice", "bob", "alice"]):
        store.add_tes_task(task_id=f"t{i}", owner=owner, name=f"task{i}", task_json="{}", tags={}, gpus=i % 2)
    assert store.claim_tes_task("t1", "QUEUED", "RUNNING", attempt=1, run_id="tesrun01")
    synthetic_run(store, home, "tesrun01", name="t1", steps=["exec-0"], state="running", node="gpu-node", gpus=(2,))
    store.close()

    page = client(home).get("/api/tes/tasks").json()
    assert page["total"] == 3
    assert [(t["id"], t["owner"], t["state"]) for t in page["tasks"]] == [
        ("t2", "alice", "QUEUED"),
        ("t1", "bob", "RUNNING"),
        ("t0", "alice", "QUEUED"),
    ]
    ran = page["tasks"][1]
    assert (ran["run_id"], ran["node"], ran["gpus"], ran["gpus_asked"], ran["attempt"]) == (
        "tesrun01",
        "gpu-node",
        [2],
        1,
        1,
    )
    assert page["tasks"][0]["node"] is None and page["tasks"][0]["run_id"] is None

    c = client(home)
    assert [t["id"] for t in c.get("/api/tes/tasks?state=RUNNING").json()["tasks"]] == ["t1"]
    second = c.get("/api/tes/tasks?limit=1&offset=1").json()
    assert [t["id"] for t in second["tasks"]] == ["t1"] and second["total"] == 3
    bad = c.get("/api/tes/tasks?state=DONE")
    assert bad.status_code == 400 and "state='DONE'" in bad.json()["error"]


def test_no_tasks_page_is_empty(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    Store(home / "state.db").close()
    assert client(home).get("/api/tes/tasks").json() == {"tasks": [], "total": 0, "offset": 0, "limit": 50}
