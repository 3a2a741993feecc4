"""A run keeps the plan it was submitted with: the plan round-trips through the store, a
local run pins and pulls its images once, and an executor opened later (resume, a detached
executor) follows the stored plan even where planning again would answer otherwise."""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hetflow.errors import Problem
from hetflow.execute import FakeEngine, RunnerConfig, RunPlan, Settings, build_runner, open_run, submit_run
from hetflow.images.errors import NotFoundError
from hetflow.images.service import ResolveResult
from hetflow.inventory.models import Node
from hetflow.plan.instance import MachineClass, Placement, Plan
from hetflow.state import SCHEMA_VERSION, Store
from tests.unit.builders import gpu, load, node
from tests.unit.test_runner_cluster import QueueBackend

DIGEST = "sha256:" + "b" * 64
FAST = RunnerConfig(poll_interval=0.01, retry_backoff=0.01)


@dataclass
class PullingEngine(FakeEngine):
    """FakeEngine that can pull, counting every image question and pull."""

    asked: list[str] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)

    def image_exists(self, image: str) -> bool:
        self.asked.append(image)
        return super().image_exists(image)

    def pull(self, ref: str, *, insecure: bool = False) -> None:
        self.pulled.append(ref)
        self.images.add(ref)


@dataclass
class CountingResolver:
    """An index per registry image, resolved to one build; local names are not indexes."""

    calls: list[str] = field(default_factory=list)

    def __call__(self, image: str, node: Node) -> ResolveResult:
        self.calls.append(image)
        if not image.startswith("reg.test"):
            raise NotFoundError(f"no index {image}")
        pinned = f"{image.rsplit(':', 1)[0]}@{DIGEST}"
        return ResolveResult(
            reference=image,
            node=node.name,
            source="registry",
            digest=DIGEST,
            is_index=True,
            chosen=DIGEST,
            pinned=pinned,
            explanation=[],
            verdicts=[],
        )


def _quiet(*_: object) -> None:
    pass


def _no_problems(problems: object) -> None:
    pass


def test_a_run_plan_round_trips_through_the_store(tmp_path: Path) -> None:
    classes = (
        MachineClass("gpu.a100", 1, 8, 32 << 30, gpus=2, gpu_model="A100", gpu_cc=(8, 0), labels=(("zone", "a"),)),
        MachineClass("cpu", 4, 16, 64 << 30, speed=1.5),
    )
    plan = Plan(
        placements={
            "a": Placement("a", "gpu", "gpu.a100-0", "gpu.a100", 0.0, 2.5, 1.0, 1 << 30, (0, 1)),
            "b": Placement("b", "default", "cpu-2", "cpu", 2.5, 4.0, 2.0, 0),
        },
        makespan=4.0,
        cost=0.25,
        algorithm="heuristic",
        notes=("one note",),
    )
    stored = RunPlan(
        kind="cluster",
        plan=plan,
        images={"a": {"gpu": f"reg.test/app@{DIGEST}"}, "b": {"default": "x"}},
        pulls=(f"reg.test/app@{DIGEST}",),
        variants={"a": "gpu", "b": "default"},
        priority={"a": 0.0, "b": 2.5},
        reasons={"a": "est. 2.5s"},
        classes=classes,
    )
    store = Store(tmp_path / "state.db")
    store.create_run(
        run_id="r1",
        name="wf",
        workflow_file="/w/wf.yaml",
        spec_json="{}",
        params_json="{}",
        uid=0,
        gid=0,
        workdir="/w",
        steps=["a", "b"],
        plan_json=stored.to_json(),
    )
    text = Store(tmp_path / "state.db").plan_json("r1")
    assert text is not None
    assert RunPlan.from_json(text) == stored
    assert store.plan_json("nope") is None


TWO_VARIANTS = """apiVersion: hetflow/v1
name: pick
steps:
  x:
    variants:
      gpu: {image: "reg.test:5000/app:latest", resources: {gpus: 1}, estimate: 100s}
      cpu: {image: "reg.test:5000/app:latest", estimate: 10s}
  y:
    needs: [x]
    image: localhost/only:1
"""


def _submit_local(tmp_path: Path, engine: PullingEngine, resolver: CountingResolver) -> tuple[Store, str]:
    store = Store(tmp_path / "home" / "state.db")
    opened = submit_run(
        store,
        load(TWO_VARIANTS),
        Settings(cache=False),  # these tests are about the plan followed, not results reused
        node(gpus=(gpu(0),)),
        home=tmp_path / "home",
        uid=os.getuid(),
        gid=os.getgid(),
        say=_quiet,
        problems=_no_problems,
        engine=engine,
        resolver=resolver,
    )
    assert build_runner(opened, None, FAST).execute() == "succeeded"
    return store, opened.run.id


def test_a_local_run_pins_and_pulls_once_and_runs_the_pinned_build(tmp_path: Path) -> None:
    engine = PullingEngine(clock=time.time, images={"localhost/only:1"})
    resolver = CountingResolver()
    store, rid = _submit_local(tmp_path, engine, resolver)
    pinned = f"reg.test:5000/app@{DIGEST}"
    assert sorted(resolver.calls) == ["localhost/only:1", "reg.test:5000/app:latest"]  # each image resolved once
    assert engine.pulled == [pinned]
    assert engine.asked.count(pinned) == 2  # before the pull, and the preflight: nothing asks again
    assert [a.image for a in store.attempts(rid, "x")] == [pinned]
    text = store.plan_json(rid)
    assert text is not None and RunPlan.from_json(text).images["x"] == {"gpu": pinned, "cpu": pinned}


def test_resume_follows_the_stored_local_plan_not_a_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = PullingEngine(clock=time.time, images={"localhost/only:1"})
    store, rid = _submit_local(tmp_path, engine, CountingResolver())
    assert store.step(rid, "x").variant == "cpu"  # the plan: 10 s on CPU beats 100 s on the GPU
    store.set_step(rid, "x", state="pending")
    store.set_step(rid, "y", state="pending")
    # Planning again now would take the greedy rule (the free GPU); the run keeps its plan.
    monkeypatch.setenv("HETFLOW_PLANNER", "greedy")
    again = PullingEngine(clock=time.time, images={"localhost/only:1", f"reg.test:5000/app@{DIGEST}"})
    opened = open_run(store, rid, node(gpus=(gpu(0),)), engine=again)
    assert opened.plan.planner == "plan"
    assert build_runner(opened, None, FAST).execute() == "succeeded"
    assert [a.variant for a in store.attempts(rid, "x")] == ["cpu", "cpu"]
    assert again.pulled == []  # nothing pinned or pulled again


CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: c
nodeTypes:
  - {{name: {name}, count: 1, cores: 4, memory: 8Gi}}
"""

CHAIN = """apiVersion: hetflow/v1
name: chain
steps:
  a: {image: x}
  b: {needs: [a], image: x}
"""


def test_resume_follows_the_stored_cluster_plan_after_the_cluster_file_changed(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER.format(name="old-node"))
    settings = Settings(backend="slurm", cluster=str(cluster), cache=False)  # the plan followed, not reuse
    store = Store(tmp_path / "home" / "state.db")
    backend = QueueBackend(FakeEngine(clock=time.time))
    opened = submit_run(
        store,
        load(CHAIN),
        settings,
        node(),
        home=tmp_path / "home",
        uid=os.getuid(),
        gid=os.getgid(),
        say=_quiet,
        problems=_no_problems,
        backend=backend,
        resolver=CountingResolver(),
    )
    rid = opened.run.id
    # The cluster file now names another node type: planning again would place both steps there.
    cluster.write_text(CLUSTER.format(name="new-node"))
    reopened = open_run(store, rid, node(), backend=backend)
    assert reopened.plan == opened.plan
    assert build_runner(reopened, None, FAST).execute() == "succeeded"
    assert {s.step: s.node for s in store.steps(rid)} == {"a": "old-node", "b": "old-node"}
    assert "planned makespan" in reopened.banner() and str(cluster) in reopened.banner()


V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, workflow_file TEXT NOT NULL, state TEXT NOT NULL,
  created REAL NOT NULL, started REAL, ended REAL, pid INTEGER, uid INTEGER NOT NULL,
  gid INTEGER NOT NULL, workdir TEXT NOT NULL, spec_json TEXT NOT NULL,
  params_json TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
  backend TEXT NOT NULL DEFAULT 'local', backend_json TEXT NOT NULL DEFAULT '{}');
CREATE TABLE steps (
  run_id TEXT NOT NULL REFERENCES runs(id), step TEXT NOT NULL, ord INTEGER NOT NULL,
  state TEXT NOT NULL, variant TEXT, node TEXT, gpus TEXT NOT NULL DEFAULT '[]',
  attempts INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, started REAL, ended REAL,
  reason TEXT NOT NULL DEFAULT '', not_before REAL, PRIMARY KEY (run_id, step));
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step TEXT, time REAL NOT NULL,
  kind TEXT NOT NULL, message TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO runs VALUES
  ('r1', 'wf', 'f.yaml', 'failed', 1.0, 1.0, 2.0, NULL, 0, 0, '/w', '{}', '{}', '', 'local', '{}');
INSERT INTO steps (run_id, step, ord, state) VALUES ('r1', 'a', 0, 'failed');
INSERT INTO events (run_id, step, time, kind, message) VALUES ('r1', NULL, 1.0, 'created', 'run of wf created');
"""


def test_a_schema_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.commit()
    db.close()

    store = Store(path)

    assert store.plan_json("r1") is None  # recorded before plans were stored: resume plans it
    assert [(e.kind, e.data) for e in store.events("r1")] == [("created", "{}")]
    store.add_event("r1", "a", "attempt-started", "a-1", '{"attempt": 1, "container": "c"}')
    assert store.events("r1")[-1].data == '{"attempt": 1, "container": "c"}'
    store.create_run(
        run_id="r2",
        name="wf",
        workflow_file="f.yaml",
        spec_json="{}",
        params_json="{}",
        uid=0,
        gid=0,
        workdir="/w2",
        steps=["a"],
        plan_json="{}",
    )
    assert store.plan_json("r2") == "{}"
    version = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    store.record_expansion("r2", "a", "[1, 2]")  # schema 3: fan-out expansions are kept
    assert store.expansions("r2") == [("a", "[1, 2]")]
    Store(path)  # opening again finds nothing to do


def test_a_refused_local_run_records_nothing(tmp_path: Path) -> None:
    engine = PullingEngine(clock=time.time)  # localhost/only:1 is not in the image store
    store = Store(tmp_path / "home" / "state.db")
    seen: list[Problem] = []
    with pytest.raises(Exception, match="localhost/only:1"):
        submit_run(
            store,
            load(TWO_VARIANTS),
            Settings(),
            node(gpus=(gpu(0),)),
            home=tmp_path / "home",
            uid=os.getuid(),
            gid=os.getgid(),
            say=_quiet,
            problems=seen.extend,
            engine=engine,
            resolver=CountingResolver(),
        )
    assert store.runs() == []
