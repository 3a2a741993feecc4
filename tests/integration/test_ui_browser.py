"""The dashboard in a real headless Chromium (Debian's chromium + chromium-driver, driven by
selenium) against `hetflow ui` running as a real subprocess over real runs (real podman
containers): runs list, one run's live DAG, steps, log and Gantt, nodes, plans and Pareto,
the token in the page, and the stop / resume actions.  Screenshots of every view land in
tests/output/ui/."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, write
from tests.integration.uikit import (
    Dashboard,
    browser_missing,
    chromium,
    csp_violations,
    dashboard,
    rendered,
    screenshot,
    synthetic_run,
    wait_until,
)

pytestmark = pytest.mark.integration

CHAIN = f"""
apiVersion: hetflow/v1
name: uichain
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "echo line-a-1; sleep 2; echo line-a-2"]
  b:
    needs: [a]
    image: {BUSYBOX}
    command: [sh, -c, "echo line-b; sleep 2"]
  c:
    needs: [b]
    image: {BUSYBOX}
    command: [sh, -c, "sleep 2; echo line-c"]
"""


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    why = browser_missing()
    if why:
        pytest.skip(why)
    d = chromium()
    try:
        yield d
    finally:
        d.quit()


def css(driver: Any, selector: str) -> Any:
    return wait_until(lambda: driver.find_element("css selector", selector), 30, selector)


def texts(driver: Any, selector: str) -> list[str]:
    return [str(e.text) for e in driver.find_elements("css selector", selector)]


def test_a_live_run_its_dag_steps_log_and_gantt(driver: Any, hf: Hetflow, tmp_path: Path) -> None:
    hf("run", write(tmp_path, CHAIN), "--detach")
    run_id = hf.last_run()
    with dashboard(hf.home, env=hf.env) as ui:
        driver.get(ui.url("#/runs"))
        rendered(driver, "runs")
        row = css(driver, f'#runs-table tbody tr[data-run-id="{run_id}"]')
        assert row.find_element("css selector", "td.name").text == "uichain"
        screenshot(driver, "runs")
        row.click()
        rendered(driver, "run")
        assert css(driver, "#run-view").get_attribute("data-run-id") == run_id
        node_c = css(driver, 'svg#dag g.dag-node[data-step="c"]')
        first = node_c.get_attribute("data-state")
        assert first != "succeeded", "the run finished before the page saw it: nothing live to check"
        driver.execute_script("window.__hetflowMarker = 'kept'; arguments[0].__marker = 'same-element';", node_c)
        # c's panel opened before c wrote its line: the line arrives in pre#log while it is open
        css(driver, '#steps-table tbody tr[data-step="c"]').click()
        css(driver, '#step-panel[data-step="c"]')
        wait_until(lambda: "line-c" in css(driver, "pre#log").text, 60, "c's line streamed into pre#log")
        wait_until(lambda: node_c.get_attribute("data-state") == "succeeded", 60, "step c succeeded in the DAG")
        # the same DOM element changed (no reload, no re-render of the DAG)
        assert driver.execute_script("return arguments[0].__marker", node_c) == "same-element"
        assert driver.execute_script("return window.__hetflowMarker") == "kept"
        wait_until(lambda: css(driver, "#run-state").text == "succeeded", 30, "run state succeeded")
        assert {e.get_attribute("data-step") for e in driver.find_elements("css selector", "svg#dag g.dag-node")} == {
            "a",
            "b",
            "c",
        }
        rows = driver.find_elements("css selector", "#steps-table tbody tr[data-step]")
        assert [r.get_attribute("data-step") for r in rows] == ["a", "b", "c"]
        for r in rows:
            assert r.find_element("css selector", "td.state").text == "succeeded"
            assert r.find_element("css selector", "td.exit").text == "0"
            assert r.find_element("css selector", "td.retries").text == "0"
            image = r.find_element("css selector", "td.image")
            assert "hetflow-test/busybox" in (image.get_attribute("title") or "") + image.text
        # Gantt: one bar per step (plan and actual)
        wait_until(lambda: driver.find_elements("css selector", "#gantt svg g.bars g.task"), 30, "gantt bars")
        tasks = {e.get_attribute("data-task") for e in driver.find_elements("css selector", "#gantt svg g.bars g.task")}
        assert {"a", "b", "c"} <= tasks
        screenshot(driver, "run")
        rows[0].click()
        css(driver, '#step-panel[data-step="a"]')
        wait_until(lambda: "line-a-2" in css(driver, "pre#log").text, 30, "a's log in pre#log")
        assert css(driver, "pre#log").text.index("line-a-1") < css(driver, "pre#log").text.index("line-a-2")
        screenshot(driver, "step-log")
        assert csp_violations(driver) == []  # the DAG, the Gantt and the log run under the page's CSP


def test_nodes_view_lists_this_machine_and_its_fake_gpus(driver: Any, hf: Hetflow) -> None:
    """HETFLOW_FAKE_GPUS=a100:2 gives the server two fake A100s (fake devices: no real GPU
    here): the view lists this machine's cores and memory as `hetflow nodes --json` reports
    them and a row per GPU; a GPU lease written to the store shows as its holder."""
    from hetflow.state import Lease

    env = {**hf.env, "HETFLOW_FAKE_GPUS": "a100:2"}
    many_runs(hf.home, 1)
    with dashboard(hf.home, env=env) as ui:
        node = ui.get("/api/nodes")[0]
        driver.get(ui.url("#/nodes"))
        rendered(driver, "nodes")
        section = css(driver, f'#nodes-view section.node[data-node="{node["name"]}"]')
        summary = section.find_element("css selector", "dl.summary").text
        assert f"cores\n{node['cpu']['cores']}" in summary, summary
        assert f"{node['memory_gib']:.1f}" in summary or f"{node['memory_gib']:.0f}" in summary, summary
        gpus = section.find_elements("css selector", "tr.gpu")
        assert [g.get_attribute("data-gpu-index") for g in gpus] == ["0", "1"]
        for g in gpus:
            assert "A100" in g.find_element("css selector", "td.model").text
            assert g.find_element("css selector", "td.cc").text == "8.0"
            assert g.find_element("css selector", "td.holder").text == "-"
        screenshot(driver, "nodes")

        store = Store(hf.home / "state.db")
        try:
            holder = Lease(gpu_uuid="", run_id="r0000000", step="a", attempt=1, container="hf-x", pid=1)
            assert store.acquire_gpus([node["gpus"][1]["uuid"]], holder, [])
        finally:
            store.close()
        driver.refresh()
        rendered(driver, "nodes")
        holders = texts(driver, f'section.node[data-node="{node["name"]}"] tr.gpu td.holder')
        assert holders == ["-", "r0000000/a"]  # the contract: RUNID/step

        # a running Slurm run (recorded, no Slurm here: the view reads the store): its plan's node
        # classes and the attempt on gpu-a100-0 holding GPUs 0,1 show beside this machine
        from hetflow.execute import RunPlan
        from hetflow.plan import MachineClass

        plan = RunPlan(
            kind="cluster",
            classes=(MachineClass(name="gpu-a100", count=2, cores=64, memory=1 << 38, gpus=8, gpu_model="A100"),),
        )
        store = Store(hf.home / "state.db")
        try:
            synthetic_run(
                store,
                hf.home,
                "slurm001",
                steps=["train"],
                state="running",
                backend="slurm",
                plan_json=plan.to_json(),
                node="gpu-a100-0",
                gpus=(0, 1),
            )
        finally:
            store.close()
        driver.refresh()
        rendered(driver, "nodes")
        cluster = css(driver, '#clusters-view section.cluster[data-run-id="slurm001"]')
        assert cluster.find_element("css selector", 'tr.node-class[data-class="gpu-a100"]').text.split()[:5] == [
            "gpu-a100",
            "2",
            "64",
            "256.0",
            "GiB",
        ]
        busy = cluster.find_element("css selector", 'tr.busy[data-node="gpu-a100-0"]')
        assert busy.find_element("css selector", "td.gpus").text == "0,1"
        assert busy.find_element("css selector", "td.holder").text == "slurm001/train"
        screenshot(driver, "nodes-cluster")


def many_runs(home: Path, n: int) -> None:
    store = Store(home / "state.db")
    try:
        for i in range(n):
            state = "failed" if i % 5 == 0 else "succeeded"
            synthetic_run(store, home, f"r{i:07d}", name=f"{'odd' if i % 2 else 'even'}-{i}", steps=["a"], state=state)
    finally:
        store.close()


def test_runs_list_filters_and_pages(driver: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    many_runs(home, 120)  # a synthetic store made with the Store API: 24 failed, 60 "odd-"
    with dashboard(home) as ui:
        driver.get(ui.url("#/runs"))
        rendered(driver, "runs")

        def ids() -> list[str]:
            return [
                r.get_attribute("data-run-id") for r in driver.find_elements("css selector", "#runs-table tbody tr")
            ]

        assert wait_until(lambda: len(ids()) == 50, 30, "a first page of 50")
        assert ids()[0] == "r0000119"
        assert "120" in css(driver, "#page-info").text
        css(driver, "#page-next").click()
        wait_until(lambda: ids()[:1] == ["r0000069"], 30, "the second page")
        css(driver, "#page-next").click()
        wait_until(lambda: len(ids()) == 20 and ids()[-1] == "r0000000", 30, "the last page of 20")
        css(driver, "#page-prev").click()
        wait_until(lambda: ids()[:1] == ["r0000069"], 30, "back to the second page")
        from selenium.webdriver.support.ui import Select

        Select(css(driver, "#filter-state")).select_by_value("failed")
        wait_until(lambda: len(ids()) == 24, 30, "24 failed runs")
        assert set(texts(driver, "#runs-table tbody td.state")) == {"failed"}
        css(driver, "#filter-name").send_keys("odd")
        wait_until(lambda: len(ids()) == 12, 30, "12 failed odd runs")  # i % 5 == 0 and odd: 5, 15, ..., 115
        assert all(t.startswith("odd-") for t in texts(driver, "#runs-table tbody td.name"))
        screenshot(driver, "runs-filtered")


def test_tes_tasks_view_lists_tasks_beside_their_runs(driver: Any, tmp_path: Path) -> None:
    """The TES tasks tab: tasks the TES server keeps in the store, with owner and state, the
    run each became (a link to it) and the node and GPUs it ran on (a synthetic store)."""
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "state.db")
    try:
        store.add_tes_task(task_id="task-q", owner="alice", name="waits", task_json="{}", tags={}, gpus=0)
        store.add_tes_task(task_id="task-r", owner="bob", name="trains", task_json="{}", tags={}, gpus=1)
        store.claim_tes_task("task-r", "QUEUED", "RUNNING", attempt=1, run_id="tesrun01")
        run = {"name": "trains", "steps": ["exec-0"], "state": "running", "node": "gpu-a", "gpus": (1,)}
        synthetic_run(store, home, "tesrun01", **run)  # type: ignore[arg-type]
    finally:
        store.close()
    with dashboard(home) as ui:
        driver.get(ui.url("#/tasks"))
        rendered(driver, "tasks")
        rows = "#tasks-table tbody tr[data-task-id]"
        assert wait_until(lambda: len(driver.find_elements("css selector", rows)) == 2, 30, "two tasks")
        assert texts(driver, "#tasks-table tbody td.owner") == ["bob", "alice"]
        assert texts(driver, "#tasks-table tbody td.node") == ["gpu-a", "-"]
        assert texts(driver, "#tasks-table tbody td.gpus") == ["1", "-"]
        css(driver, "#tasks-table tbody td.run a").click()
        rendered(driver, "run")
        assert driver.current_url.endswith("#/runs/tesrun01")
        screenshot(driver, "tes-tasks")


def test_plans_view_plan_explain_and_pareto_click(driver: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    root = Path(__file__).resolve().parents[2]
    with dashboard(tmp_path / "home", "--root", str(root)) as ui:
        driver.get(ui.url("#/plans"))
        rendered(driver, "plans")
        wait_until(lambda: len(driver.find_elements("css selector", "#plan-workflow option")) > 1, 20, "workflow list")
        Select(css(driver, "#plan-workflow")).select_by_value("examples/circuit/workflow.yaml")
        Select(css(driver, "#plan-cluster")).select_by_value("examples/clusters/hetero-16.yaml")
        css(driver, "#plan-go").click()
        wait_until(lambda: driver.find_elements("css selector", "#plan-table tbody tr[data-step]"), 60, "plan table")
        steps = {
            e.get_attribute("data-step") for e in driver.find_elements("css selector", "#plan-table tbody tr.plan-step")
        }
        expected = ui.get("/api/plan?workflow=examples/circuit/workflow.yaml&cluster=examples/clusters/hetero-16.yaml")
        assert steps == {s["step"] for s in expected["steps"]}
        assert driver.find_elements("css selector", "#plan-table tbody tr.explain[data-step]")
        screenshot(driver, "plans")

        Select(css(driver, "#plan-catalog")).select_by_value("examples/clusters/catalog.yaml")
        css(driver, "#pareto-go").click()
        canvas = css(driver, "canvas#pareto-chart")
        point = wait_until(
            lambda: driver.execute_script(
                "const c = document.getElementById('pareto-chart'); const ch = c && (c._chart || Chart.getChart(c));"
                "if (!ch) return null; const m = ch.getDatasetMeta(0); const p = m.data[0];"
                "const r = c.getBoundingClientRect(); return p ? {x: p.x, y: p.y, w: r.width, h: r.height,"
                " index: ch.data.datasets[0].data[0].q.index} : null"
            ),
            60,
            "the Pareto chart's points",
        )
        # the chosen point (dataset 0, drawn on top; a frontier point at the same place is the same cluster)
        ActionChains(driver).move_to_element_with_offset(
            canvas, int(point["x"] - point["w"] / 2), int(point["y"] - point["h"] / 2)
        ).click().perform()
        box = wait_until(
            lambda: (e := driver.find_element("css selector", "#pareto-point")).get_attribute("data-index") and e,
            10,
            "#pareto-point filled by the click",
        )
        assert box.get_attribute("data-index") == str(point["index"])
        assert box.find_elements("css selector", "table tbody tr[data-step]")
        driver.execute_script("arguments[0].scrollIntoView()", canvas)
        screenshot(driver, "pareto")
        assert csp_violations(driver) == []  # Chart.js and the plan's Gantt run under the page's CSP


def test_the_page_with_a_token_sends_it_on_every_call(hf: Hetflow, tmp_path: Path) -> None:
    """Bound to a non-loopback address with --token: the page opened with ?token= works, and
    every request it makes (fetches: the header; event streams: ?token=) carries it."""
    if browser_missing():
        pytest.skip(browser_missing() or "")
    from tests.integration.uikit import non_loopback_ip

    token = "k" * 8 + "TOKEN-ui-" + "x" * 15
    home = tmp_path / "home"
    many_runs(home, 3)
    host = non_loopback_ip()
    d = chromium(performance_log=True)
    try:
        with dashboard(home, "--token", token, host=host) as ui:
            assert f"?token={token}" in ui.printed_url()
            driver_get_ok(d, ui)
            d.find_element("css selector", "#runs-table tbody tr[data-run-id]").click()
            rendered(d, "run")
            time.sleep(1)
            requests = network_requests(d)
            own = [r for r in requests if r["url"].startswith(ui.base)]
            assert {"/", "/static/app.js"} <= {r["url"][len(ui.base) :].split("?")[0] for r in own}, own
            for r in own:  # the page, its files, the API and the streams: each carries the token
                if r["url"] == f"{ui.base}/static/boot.js":
                    continue  # the one file that needs none (it holds no data): the page cannot add it there
                assert f"token={token}" in r["url"] or r["headers"].get("Authorization") == f"Bearer {token}", r
            api = [r for r in own if "/api/" in r["url"]]
            assert any("/events" in r["url"] for r in api), api
            for r in api:
                if "/events" in r["url"] or "/stream" in r["url"]:
                    assert f"token={token}" in r["url"], r  # EventSource cannot send a header
                else:
                    assert r["headers"].get("Authorization") == f"Bearer {token}", r
            screenshot(d, "token")
    finally:
        d.quit()


def driver_get_ok(d: Any, ui: Dashboard) -> None:
    d.get(ui.url("#/runs"))
    rendered(d, "runs")


def network_requests(d: Any) -> list[dict[str, Any]]:
    out = []
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            req = msg["params"]["request"]
            out.append({"url": req["url"], "headers": req.get("headers", {})})
    return out


LONG = f"""
apiVersion: hetflow/v1
name: uistop
steps:
  a:
    image: {BUSYBOX}
    command: [sh, -c, "sleep 1; echo a"]
  b:
    needs: [a]
    image: {BUSYBOX}
    # the first attempt runs until the test stops it (no race with a timer on a loaded machine);
    # the resumed one ends at once
    command: [sh, -c, 'if [ "$HETFLOW_ATTEMPT" = 1 ]; then sleep 300; fi; echo b']
"""


def test_stop_and_resume_from_the_page(driver: Any, hf: Hetflow, tmp_path: Path) -> None:
    hf("run", write(tmp_path, LONG), "--detach")
    run_id = hf.last_run()
    token = "r" * 32
    with dashboard(hf.home, "--actions", "--token", token, env=hf.env) as ui:
        driver.get(ui.url(f"#/runs/{run_id}"))
        rendered(driver, "run")
        driver.execute_script("window.confirm = () => true")
        wait_until(
            lambda: css(driver, 'svg#dag g.dag-node[data-step="b"]').get_attribute("data-state") == "running",
            60,
            "b running",
        )
        css(driver, "button#action-stop").click()
        wait_until(lambda: css(driver, "#run-state").text == "stopped", 60, "#run-state stopped")
        # the stop's answer: the run is marked stopped before its containers are; the page keeps
        # Resume off until then (a resume in between was undone by the stop's last writes)
        wait_until(lambda: "stopped" in css(driver, "#run-actions .message").text, 120, "the stop's answer")
        assert css(driver, "button#action-resume").is_enabled()
        assert hf.show(run_id)["state"] == "stopped"
        screenshot(driver, "stopped")
        driver.execute_script("window.confirm = () => true")
        css(driver, "button#action-resume").click()
        wait_until(lambda: css(driver, "#run-state").text == "succeeded", 180, "#run-state succeeded after resume")
        assert hf.show(run_id)["state"] == "succeeded"
        screenshot(driver, "resumed")


def test_a_step_a_cluster_engine_queues_shows_queued_with_its_reason(driver: Any, tmp_path: Path) -> None:
    """A step handed to Slurm that Slurm has not started (its reason says why) shows queued,
    with no start and no elapsed time, beside one that runs, whose attempt says when the
    engine ran it and what it used."""
    home = tmp_path / "home"
    store = Store(home / "state.db")
    try:
        synthetic_run(store, home, "rqueued1", steps=["a", "b"], state="running", backend="slurm")
        store.set_step("rqueued1", "b", reason="pending: Resources", started=None)
        handed = store.attempts("rqueued1", "a")[0].started or 0.0
        store.set_usage("rqueued1", "a", 1, run_started=handed + 3, run_ended=handed + 5.5)
        store.set_usage("rqueued1", "a", 1, peak_memory=64 << 20, cpu_seconds=1.5)
    finally:
        store.close()
    with dashboard(home) as ui:
        driver.get(ui.url("#/runs/rqueued1"))
        rendered(driver, "run")
        b = css(driver, '#steps-table tbody tr[data-step="b"]')
        wait_until(lambda: b.find_element("css selector", "td.state").text == "queued", 30, "b shown queued")
        assert b.find_element("css selector", "td.state").get_attribute("title") == "pending: Resources"
        assert [b.find_element("css selector", f"td.{c}").text for c in ("started", "duration")] == ["-", "-"]
        a = css(driver, '#steps-table tbody tr[data-step="a"]')
        assert a.find_element("css selector", "td.state").text == "running"
        screenshot(driver, "run-queued-step")
        a.click()  # its attempt: handed over, then run by the engine for 2.5 s, and what it used
        css(driver, '#step-panel[data-step="a"]')
        wait_until(lambda: "for 2.5s, peak 64 MiB, CPU 1.5s" in css(driver, "#step-panel").text, 30, "a's usage")
