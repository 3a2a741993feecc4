"""What ``hetflow show`` (and the report, the dashboard, ``trace``, ``logs``) tell about a run
(issue 42, part 3): its effective params and where each came from, who submitted it."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetflow.execute import (
    attempt_label,
    cached_origin,
    create_run,
    layer_params,
    load_settings,
    param_sources,
    read_params_file,
)
from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.kubernetes import KubernetesBackend, KubernetesSettings
from hetflow.execute.backends.ray.keeper import task_id
from hetflow.execute.backends.slurm import SlurmBackend, SlurmSettings
from hetflow.execute.data.cache import ResultCache
from hetflow.execute.run.compose import compose_runner
from hetflow.execute.run.options import ProcessSeams, RunOptions
from hetflow.kube import ANNOTATION_JOB
from hetflow.plan import feasibility_problems
from hetflow.plan.instance import Placement
from hetflow.report import run_report_html, step_items
from hetflow.report.progress import PlainReporter
from hetflow.spec import parse_workflow
from hetflow.state import AttemptRecord, Store
from tests.unit.builders import Outcome, World, load_steps, node, world
from tests.unit.test_runner_cluster import QueueBackend, cluster_runner
from tests.unit.test_slurm_faults import FakeClient as SlurmFake
from tests.unit.test_slurm_faults import row as slurm_row

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


ONE = "a: {image: img, command: [w], outputs: [o.txt]}\n"


def _runs_from_the_cache(tmp_path: Path, n: int) -> tuple[World, list[str]]:
    """``n`` runs of ONE: the first runs step a (its log says "made by the first run"),
    each later one takes it from the cache (of the run before: a chain)."""
    w = world(tmp_path, ONE, outcomes={"a": [Outcome(files={"o.txt": b"x\n"}, log=("made by the first run",))]})
    w.engine.images.add("img")
    ids = [w.run.id]
    for i in range(n):
        if i:
            ids.append(create_run(w.store, load_steps(ONE), w.home, os.getuid(), os.getgid()).id)
        runner = compose_runner(
            store=w.store, engine=w.engine, node=w.node, workflow=load_steps(ONE).workflow,
            run=w.store.run(ids[-1]), options=RunOptions(config=w.config, cache=ResultCache(w.store, w.home / "cache")),
            seams=ProcessSeams(clock=w.clock, sleep=w.clock.sleep, pid=4242, alive=lambda p: False),
        )  # fmt: skip
        assert runner.execute() == "succeeded"
    return w, ids


def test_logs_of_a_step_taken_from_the_cache_name_its_run_and_print_its_log(tmp_path: Path) -> None:
    w, (first, second) = _runs_from_the_cache(tmp_path, 2)
    assert w.store.step(second, "a").attempts == 0  # taken from the cache: no container ran in the second run
    from hetflow.cli.main import app, register_commands

    register_commands(["logs"])
    out = CliRunner().invoke(app, ["logs", second, "a"], env={"HETFLOW_HOME": str(w.home)})
    assert out.exit_code == 0, out.output
    assert out.stdout == "made by the first run\n"
    assert f"its result came from run {first} (attempt 1)" in out.stderr


def test_logs_follow_a_chain_of_cached_results_to_the_run_that_made_it(tmp_path: Path) -> None:
    w, (first, _second, third) = _runs_from_the_cache(tmp_path, 3)
    origin = cached_origin(w.store, third, "a")
    assert origin is not None and origin.run_id == first and origin.attempt is not None
    assert cached_origin(w.store, first, "a") is None


def test_a_retried_step_shows_its_accepted_attempts_own_start_and_elapsed(tmp_path: Path) -> None:
    """STARTED/ELAPSED spanned attempt 1's start to the end (8.8 s shown for a 1.1 s step),
    and the live lines printed attempt 1's start on attempt 2: the step's start is now its
    current attempt's."""
    w = world(tmp_path, "flaky:\n  image: x\n  retries: 1\n", outcomes={"flaky": [Outcome(3, 5.0), Outcome(0, 1.1)]})
    assert w.execute() == "succeeded"
    first, second = w.store.attempts(w.run.id, "flaky")
    step = w.step("flaky")
    assert step.started == second.started and step.started is not None and first.started < step.started
    assert second.ended is not None and first.ended is not None
    own = second.ended - step.started  # the fake engine's end is seen at the next poll (1 s)
    assert step.ended is not None and step.ended - step.started == own < 5.0
    history = json.loads(_cli(w.home, "show", w.run.id, "--json"))["steps"][0]["attempt_history"]
    assert [h["elapsed"] for h in history] == [first.ended - first.started, own]
    assert f"{own:.1f}s" in _cli(w.home, "show", w.run.id).split("flaky", 1)[1].splitlines()[0]


@pytest.mark.parametrize(
    ("step", "attempt", "item", "group", "whole", "label"),
    [
        ("merge", 1, None, False, True, "merge #1 | "),
        ("qc.0", 1, {"sample": "a"}, False, True, "qc[0 sample=a] #1 | "),
        ("qc.0", 1, {"sample": "a"}, True, False, "qc[0 sample=a] | "),
        ("qc.0", 2, {"sample": "a"}, True, False, "qc[0 sample=a] #2 | "),
        ("count.3", 1, 3, True, False, "count[3] | "),  # a range: the value is the index
        ("count.3", 1, None, True, False, "count[3] | "),  # values not recorded
        ("qc.1", 1, {"x": "y" * 60}, True, False, f"qc[1 x={'y' * 37}…] | "),
        ("merge", 1, None, False, False, ""),
    ],
    ids=["step", "item-mixed", "item-in-group", "item-retried", "range", "unknown", "long", "one-attempt"],
)
def test_log_prefixes_say_item_and_attempt_apart(
    step: str, attempt: int, item: object, group: bool, whole: bool, label: str
) -> None:
    """`merge.1 |` was attempt 1 while `qc.0 |` was item 0."""
    assert attempt_label(_attempt(step, attempt), group=group, whole=whole, item=item) == label


FAN = "qc: {image: img, command: [w], foreach: [{sample: a}, {sample: b}]}\n"


def _fan_out_run(tmp_path: Path) -> World:
    """A run of FAN recorded with its items, as ``hetflow run`` records them, and run."""
    w = world(tmp_path, FAN, outcomes={f"qc.{i}": [Outcome(log=(f"item {i}",))] for i in range(2)})
    w.engine.images.add("img")
    loaded = load_steps(FAN)
    run = create_run(
        w.store, loaded, w.home, os.getuid(), os.getgid(),
        expansions=[(n, json.dumps(list(items))) for n, items in loaded.fanouts.items()],
    )  # fmt: skip
    w = dataclasses.replace(w, run=run)
    assert w.execute() == "succeeded"
    return w


def test_logs_trace_and_the_live_lines_carry_each_items_values(tmp_path: Path) -> None:
    w = _fan_out_run(tmp_path)
    rid = w.run.id
    assert _cli(w.home, "logs", rid).splitlines() == ["qc[0 sample=a] #1 | item 0", "qc[1 sample=b] #1 | item 1"]
    assert _cli(w.home, "logs", rid, "qc").splitlines() == ["qc[0 sample=a] | item 0", "qc[1 sample=b] | item 1"]
    rows = json.loads(_cli(w.home, "trace", rid, "--json"))
    assert [(r["step"], r["item"]) for r in rows] == [("qc.0", {"sample": "a"}), ("qc.1", {"sample": "b"})]
    tsv = [line.split("\t") for line in _cli(w.home, "trace", rid).splitlines()]
    assert [r[tsv[0].index("item")] for r in tsv[1:]] == ["sample=a", "sample=b"]
    out = io.StringIO()
    PlainReporter(out, items=lambda run_id: step_items(w.store.expansions(run_id))).update(
        w.store.run(rid), w.store.steps(rid)
    )
    assert [line.split(" ", 2)[2] for line in out.getvalue().splitlines()] == [
        "qc[0 sample=a]: succeeded",
        "qc[1 sample=b]: succeeded",
    ]


def test_validate_notes_name_an_items_values(tmp_path: Path) -> None:
    loaded = load_steps("qc: {image: img, resources: {cpus: 500}, optional: true, foreach: [{sample: a}]}\n")
    notes = [p.message for p in feasibility_problems(loaded, node())]
    assert notes and notes[0].startswith("step 'qc.0' [sample=a] asks for 500 CPUs")


# --- engine job ids (issue 42): each backend's poll names its job as the engine does ---------


def test_slurm_poll_gives_each_job_its_slurm_job_id(tmp_path: Path) -> None:
    b = SlurmBackend(SlurmSettings(workdir=str(tmp_path)), env={})
    b.client = SlurmFake(rows=[slurm_row("RUNNING", job_id="4242")])  # type: ignore[assignment]
    (b.jobdir("r1")).mkdir(parents=True)
    (b.jobdir("r1") / "hf-r1-s-1.jobid").write_text("4242\n")
    assert b.poll("r1")["hf-r1-s-1"].native_id == "4242"


def test_a_ray_job_is_named_by_its_task_id() -> None:
    import ray

    ref = ray.ObjectRef.from_random()
    assert task_id(ref) == ref.task_id().hex() and task_id(object()) == ""


class _JobsApi:
    """A namespace holding one finished Job whose name Kubernetes shortened (the hetflow name
    is in its annotation)."""

    namespace = "ns1"

    def ns(self, resource: str, group: str = "") -> str:
        return f"/namespaces/{self.namespace}/{resource}"

    def items(self, path: str, **params: Any) -> list[dict[str, Any]]:
        if not path.endswith("/jobs"):
            return []
        meta = {"name": "hf-r1-s-1-x7k2", "annotations": {ANNOTATION_JOB: "hf-r1-s-1"}, "labels": {}}
        return [{"metadata": meta, "spec": {}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}]


def test_a_kubernetes_job_is_named_by_its_jobs_name() -> None:
    states = KubernetesBackend(KubernetesSettings(), api=_JobsApi()).poll("r1")  # type: ignore[arg-type]
    assert states["hf-r1-s-1"].native_id == "hf-r1-s-1-x7k2"


@dataclasses.dataclass
class _NamingBackend(QueueBackend):
    """The queueing fake whose engine numbers its jobs, as Slurm does."""

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {n: dataclasses.replace(s, native_id=f"9{s.name[-1]}") for n, s in super().poll(run_id).items()}


def test_each_attempts_engine_id_is_recorded_and_shown_by_show_json_and_trace(tmp_path: Path) -> None:
    w = world(tmp_path, "a: {image: x, retries: 1}\n", outcomes={"a": [Outcome(1), Outcome(0)]})
    backend = _NamingBackend(w.engine)
    placed = {"a": Placement("a", "default", "cpu.std-0", "cpu.std", 0.0, 1.0, 1.0, 0)}
    assert cluster_runner(w, backend, placed).execute() == "succeeded"
    assert [a.native_id for a in w.store.attempts(w.run.id, "a")] == ["91", "92"]
    history = json.loads(_cli(w.home, "show", w.run.id, "--json"))["steps"][0]["attempt_history"]
    assert [h["native_id"] for h in history] == ["91", "92"]
    tsv = [line.split("\t") for line in _cli(w.home, "trace", w.run.id).splitlines()]
    assert [r[tsv[0].index("native_id")] for r in tsv[1:]] == ["91", "92"]
