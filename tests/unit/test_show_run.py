"""What ``hetflow show`` (and the report, the dashboard, ``trace``, ``logs``) tell about a run
(issue 42, part 3): its effective params and where each came from, who submitted it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetflow.execute import create_run, layer_params, load_settings, param_sources, read_params_file
from hetflow.report import run_report_html
from hetflow.spec import parse_workflow
from hetflow.state import AttemptRecord, Store

WORKFLOW = """\
apiVersion: hetflow/v1
name: w
params:
  kept: 1
  top: wf
  prof: wf
  filed: wf
  cli: wf
steps:
  a: {image: busybox, command: [echo, "{{ params.top }}"]}
"""
CONFIG = "params: {top: config, prof: config}\nprofiles:\n  fast:\n    params: {prof: profile}\n"


def _recorded(tmp_path: Path) -> tuple[Store, str]:
    """A run recorded from all five layers: the workflow's default, the settings file, a
    profile, a params file and -p (``hetflow run``'s path, without running anything)."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "p.yaml").write_text("filed: file\ncli: file\n")
    settings = load_settings(None, tmp_path, {}, profiles=("fast",))
    given, origins = layer_params(
        settings.params, settings.param_origins, read_params_file(tmp_path / "p.yaml"), {"cli": "[a, b]"}
    )
    loaded = parse_workflow(WORKFLOW, str(tmp_path / "wf.yaml"), given, origins=origins)
    store = Store(tmp_path / "state.db")
    record = create_run(store, loaded, tmp_path, os.getuid(), os.getgid(), param_sources=param_sources(given, origins))
    return store, record.id


def _cli(tmp_path: Path, *args: str) -> str:
    from hetflow.cli.main import app, register_commands

    register_commands([args[0]])
    out = CliRunner().invoke(app, list(args), env={"HETFLOW_HOME": str(tmp_path)})
    assert out.exit_code == 0, out.output
    return out.output


def test_show_json_gives_each_param_its_value_and_the_layer_it_came_from(tmp_path: Path) -> None:
    _store, rid = _recorded(tmp_path)
    params = json.loads(_cli(tmp_path, "show", rid, "--json"))["params"]
    home = str(tmp_path)
    assert params == {
        "cli": {"value": "[a, b]", "from": "-p"},
        "filed": {"value": "file", "from": f"params-file {home}/p.yaml:1"},
        "kept": {"value": 1, "from": f"workflow {home}/wf.yaml:4"},
        "prof": {"value": "profile", "from": f"profile 'fast' {home}/config.yaml:4"},
        "top": {"value": "config", "from": f"config {home}/config.yaml:1"},
    }


def test_show_prints_a_params_table_and_the_report_and_dashboard_carry_it(tmp_path: Path) -> None:
    store, rid = _recorded(tmp_path)
    text = _cli(tmp_path, "show", rid)
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.split()[:1]}
    assert rows["PARAM"] == ["VALUE", "FROM"]
    assert rows["prof"][:2] == ["profile", "profile"] and rows["cli"] == ["[a,", "b]", "-p"]
    page = run_report_html(store.run(rid), store.steps(rid), [], None, params=store.run_params(rid))
    assert '<section id="params">' in page and "<td>profile &#x27;fast&#x27;" in page

    from hetflow.ui.views import RunCache, run_detail

    detail = run_detail(store, rid, RunCache())
    assert detail["params"]["filed"]["value"] == "file"


def test_a_run_recorded_without_sources_shows_its_values_from_an_unknown_layer(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.create_run(
        run_id="r1", name="w", workflow_file="wf.yaml", spec_json="{}", params_json='{"lr": 0.1}',
        uid=0, gid=0, workdir=str(tmp_path), steps=["a"],
    )  # fmt: skip
    assert json.loads(_cli(tmp_path, "show", "r1", "--json"))["params"] == {"lr": {"value": 0.1, "from": "-"}}


@pytest.mark.parametrize("uid", [0], ids=["root"])
def test_show_names_the_user_as_ps_does_and_gives_the_ids(tmp_path: Path, uid: int) -> None:
    store = Store(tmp_path / "state.db")
    store.create_run(
        run_id="r1", name="w", workflow_file="wf.yaml", spec_json="{}", params_json="{}",
        uid=uid, gid=0, workdir=str(tmp_path), steps=["a"],
    )  # fmt: skip
    assert "user root (0:0)" in _cli(tmp_path, "show", "r1")
    assert json.loads(_cli(tmp_path, "show", "r1", "--json"))["user_name"] == "root"


def _running_local(tmp_path: Path, node: str) -> Store:
    store = Store(tmp_path / "state.db")
    store.create_run(
        run_id="r1", name="w", workflow_file="wf.yaml", spec_json="{}", params_json="{}",
        uid=0, gid=0, workdir=str(tmp_path), steps=["a"], backend="local",
    )  # fmt: skip
    store.set_run("r1", state="running")
    store.set_step("r1", "a", state="launching")
    store.set_step("r1", "a", state="running", node=node)
    return store


def test_drain_of_the_only_local_node_says_nothing_moved_and_fails(tmp_path: Path) -> None:
    """A local run has no other node: its checkpoint would come back on the same machine, and
    `drain` once said "migrated on this machine" and exited 0 though the node still held it."""
    _running_local(tmp_path, "box")
    from hetflow.cli.main import app, register_commands

    register_commands(["drain"])
    out = CliRunner().invoke(app, ["drain", "box"], env={"HETFLOW_HOME": str(tmp_path)})
    assert out.exit_code == 1, out.output
    assert "uses this machine only" in out.output and "nothing moved off box" in out.output
    listed = CliRunner().invoke(app, ["drain", "box", "--json"], env={"HETFLOW_HOME": str(tmp_path)})
    assert json.loads(listed.stdout)[0]["moved"] is False


def _attempt(step: str, attempt: int, **kw: object) -> AttemptRecord:
    base: dict[str, object] = dict(
        run_id="r1", step=step, attempt=attempt, variant="default", node="n1", gpus=(), gpu_uuids=(),
        container=f"hf-r1-{step}-{attempt}", image="busybox", state="failed", exit_code=None,
        started=100.0 * attempt, ended=100.0 * attempt + 10, message="",
    )  # fmt: skip
    return AttemptRecord(**{**base, **kw})  # type: ignore[arg-type]


def test_trace_shows_an_attempt_lost_with_its_node_as_lost(tmp_path: Path) -> None:
    store = _running_local(tmp_path, "n1")
    store.add_attempt(_attempt("a", 1))
    store.set_attempt("r1", "a", 1, node_fault=1, message="NODE_FAIL on n1: the node failed")
    store.add_attempt(_attempt("a", 2, state="succeeded", exit_code=0))
    rows = json.loads(_cli(tmp_path, "trace", "r1", "--json"))
    assert [(r["attempt"], r["status"]) for r in rows] == [(1, "lost"), (2, "succeeded")]
    history = json.loads(_cli(tmp_path, "show", "r1", "--json"))["steps"][0]["attempt_history"]
    assert [(h["state"], h["lost"]) for h in history] == [("failed", True), ("succeeded", False)]
