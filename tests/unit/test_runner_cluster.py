"""The runner on an engine that queues and orders work itself (Slurm-like): children are
submitted ahead with their parents named, a child dropped because its parent failed is
submitted again without using its own retries, and placements follow the cluster plan."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from hetflow.execute import reset_for_resume
from hetflow.execute.backends import FakeBackend, FakeState
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.local.fakeengine import FakeEngine
from hetflow.execute.data.outputs import sha256_of
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.attempts import NODE_FAULT_REQUEUES
from hetflow.execute.run.compose import compose_runner
from hetflow.execute.run.options import ProcessSeams, RunOptions
from hetflow.execute.run.runner import Runner
from hetflow.plan.instance import MachineClass, Placement
from hetflow.report import run_json
from hetflow.spec.validate.checks import edges_of
from hetflow.state import StepRecord
from tests.unit.builders import Outcome, World, world

QUEUE = Capabilities(
    "queue", holds_dependencies=True, assigns_gpus=True, multi_node=True, queues=True, places_steps=True
)


@dataclass
class QueueBackend:
    """Holds each job until its dependencies finish (Slurm afterok with kill-on-invalid-dep)."""

    engine: FakeEngine
    capabilities: Capabilities = QUEUE
    jobs: dict[str, Job] = field(default_factory=dict)
    held: dict[str, Job] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    submitted: list[tuple[str, tuple[str, ...], float]] = field(default_factory=list)

    def check(self) -> None:
        pass

    def image_exists(self, image: str) -> bool:
        return True

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        return None

    def submit(self, job: Job) -> None:
        self.jobs[job.name] = job
        self.held[job.name] = job
        self.submitted.append((job.name, job.depends_on, self.engine.clock()))
        self._release_ready()

    def _release_ready(self) -> None:
        states = {n: s for run in {j.run_id for j in self.jobs.values()} for n, s in self.engine.states(run).items()}
        for name, job in list(self.held.items()):
            deps = [states.get(d) for d in job.depends_on]
            if any(d is not None and not d.running and d.exit_code != 0 for d in deps) or any(
                d in self.dropped for d in job.depends_on
            ):
                self.held.pop(name)
                self.dropped.add(name)
            elif all(d is not None and not d.running and d.exit_code == 0 for d in deps):
                self.held.pop(name)
                self.engine.start(job.container)

    def poll(self, run_id: str) -> dict[str, JobState]:
        self._release_ready()
        out = {n: JobState(n, s.running, s.exit_code, s.status) for n, s in self.engine.states(run_id).items()}
        for name, job in self.jobs.items():
            if job.run_id != run_id:
                continue
            if name in self.held:
                out[name] = JobState(name, True, None, "PENDING", reason="Dependency")
            elif name in self.dropped:
                out[name] = JobState(
                    name, False, None, "CANCELLED", reason="DependencyNeverSatisfied", dependency_failed=True
                )
        return out

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        self.engine.stop(names)

    def release(self, names: Iterable[str]) -> None:
        self.engine.remove(names)

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None


CHAIN = """
a:
  image: x
  retries: 1
  outputs: [o]
b:
  needs: [a]
  image: x
  outputs: [o]
c:
  needs: [b]
  image: x
"""
CLASSES = (
    MachineClass("gpu.t4", 1, 8, 32 << 30, gpus=1, gpu_model="Tesla T4"),
    MachineClass("cpu.std", 4, 16, 64 << 30),
)


def cluster_runner(
    w: World,
    backend: QueueBackend,
    placements: dict[str, Placement] | None = None,
    classes: tuple[MachineClass, ...] = CLASSES,
) -> Runner:
    """The runner of a cluster run: CHAIN's plan (b on the T4 node) unless ``placements``."""
    placements = placements or {
        s: Placement(
            s, "default", "cpu.std-0" if s != "b" else "gpu.t4-0", "cpu.std" if s != "b" else "gpu.t4", 0.0, 1.0, 1.0, 0
        )
        for s in ("a", "b", "c")
    }
    return compose_runner(
        store=w.store,
        node=w.node,
        workflow=w.loaded.workflow,
        run=w.store.run(w.run.id),
        backend=backend,
        options=RunOptions(config=w.config, placements=placements, classes=classes),
        seams=ProcessSeams(clock=w.clock, sleep=w.clock.sleep, pid=4242, alive=lambda p: False),
    )


def test_children_are_submitted_ahead_with_their_parents_named(tmp_path: Path) -> None:
    w = world(
        tmp_path, CHAIN, outcomes={"a": [Outcome(files={"o": b"1"}, duration=5)], "b": [Outcome(files={"o": b"2"})]}
    )
    backend = QueueBackend(w.engine)
    assert cluster_runner(w, backend).execute() == "succeeded"
    rid = w.run.id
    assert [(n, d) for n, d, _ in backend.submitted] == [
        (f"hf-{rid}-a-1", ()),
        (f"hf-{rid}-b-1", (f"hf-{rid}-a-1",)),
        (f"hf-{rid}-c-1", (f"hf-{rid}-b-1",)),
    ]
    # all three were handed to the engine before `a` finished (t=1000..1005)
    assert max(t for _, _, t in backend.submitted) < 1005
    # the engine ran them in order
    assert [s.step for s in w.script.log] == ["a", "b", "c"]
    # the plan's node class, its GPU model and its single node were passed on
    job_b = backend.jobs[f"hf-{rid}-b-1"]
    assert (job_b.node_class, job_b.gpu_model, job_b.node) == (None, "Tesla T4", "gpu.t4")
    job_a = backend.jobs[f"hf-{rid}-a-1"]
    assert (job_a.node, job_a.node_class) == (None, "cpu.std")  # 4 nodes: the engine picks one of the class
    assert w.step("b").node == "gpu.t4"


def test_a_child_dropped_for_its_failed_parent_is_submitted_again_outside_its_retries(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        CHAIN,
        outcomes={"a": [Outcome(exit_code=1), Outcome(files={"o": b"1"})], "b": [Outcome(files={"o": b"2"})]},
    )
    backend = QueueBackend(w.engine)
    assert cluster_runner(w, backend).execute() == "succeeded"
    rid = w.run.id
    assert f"hf-{rid}-b-1" in backend.dropped  # held behind a-1, which failed
    b_jobs = [n for n, _, _ in backend.submitted if n.startswith(f"hf-{rid}-b-")]
    assert b_jobs == [f"hf-{rid}-b-1", f"hf-{rid}-b-2"]
    assert backend.jobs[f"hf-{rid}-b-2"].depends_on == (f"hf-{rid}-a-2",)
    # b has retries: 0, yet it ran: being dropped was not its failure
    assert w.step("b").state == "succeeded" and [s.step for s in w.script.log].count("b") == 1


def test_what_the_engine_says_a_queued_job_waits_for_is_the_steps_reason_until_it_runs(tmp_path: Path) -> None:
    w = world(
        tmp_path, CHAIN, outcomes={"a": [Outcome(files={"o": b"1"}, duration=5)], "b": [Outcome(files={"o": b"2"})]}
    )
    backend = QueueBackend(w.engine)
    assert cluster_runner(w, backend).execute() == "succeeded"
    rid = w.run.id
    events = [e.message for e in w.store.events(rid) if e.step == "b"]
    held = [m for m in events if m == f"hf-{rid}-b-1 pending: Dependency"]
    assert len(held) == 1, events  # said once, not at every poll
    assert f"hf-{rid}-b-1 running" in events  # and when the engine stopped saying it
    # once it ran, the step's reason is its launch's again, not the stale wait
    assert "pending" not in w.step("b").reason and "planned" in w.step("b").reason


def test_a_step_whose_job_the_engine_queues_is_shown_queued_then_running(tmp_path: Path) -> None:
    w = world(
        tmp_path, CHAIN, outcomes={"a": [Outcome(files={"o": b"1"}, duration=5)], "b": [Outcome(files={"o": b"2"})]}
    )
    seen: list[tuple[str, str]] = []

    class Watched(QueueBackend):
        def poll(self, run_id: str) -> dict[str, JobState]:
            states = super().poll(run_id)
            s = w.step("b")
            seen.append((s.state, s.shown_state))
            return states

    assert cluster_runner(w, Watched(w.engine)).execute() == "succeeded"
    shown = [v for i, v in enumerate(seen) if i == 0 or v != seen[i - 1]]
    # the store says running (handed over; resume adopts it); show says queued until it runs
    assert ("running", "queued") in shown and ("running", "running") in shown, shown
    assert shown.index(("running", "queued")) < shown.index(("running", "running"))
    rows = run_json(w.store.run(w.run.id), w.store.steps(w.run.id))["steps"]
    assert [r["queued"] for r in rows] == [False, False, False]  # all over


@dataclass
class Timed(QueueBackend):
    """Says when it started and ended each job (Slurm's StartTime and EndTime), on its own clock."""

    began: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)

    def poll(self, run_id: str) -> dict[str, JobState]:
        out = super().poll(run_id)
        for n, st in out.items():
            if n not in self.held and n not in self.dropped:
                self.began.setdefault(n, self.engine.clock())
                if not st.running:
                    self.finished.setdefault(n, self.engine.clock())
                out[n] = replace(st, started=self.began[n], ended=self.finished.get(n))
        return out


def test_a_queued_steps_started_and_ended_are_the_engines_not_its_submission(tmp_path: Path) -> None:
    w = world(
        tmp_path, CHAIN, outcomes={"a": [Outcome(files={"o": b"1"}, duration=5)], "b": [Outcome(files={"o": b"2"})]}
    )
    backend = Timed(w.engine)
    assert cluster_runner(w, backend).execute() == "succeeded"
    rid = w.run.id
    submitted = {n: t for n, _, t in backend.submitted}
    for step in ("a", "b", "c"):
        name, s = f"hf-{rid}-{step}-1", w.step(step)
        (a,) = w.store.attempts(rid, step)
        assert (s.started, s.ended) == (backend.began[name], backend.finished[name])
        assert (a.started, a.run_started, a.ended) == (submitted[name], backend.began[name], backend.finished[name])
    # b was handed over while a ran; it started only after a ended
    assert w.store.attempts(rid, "b")[0].started < w.step("a").ended <= w.step("b").started


@pytest.mark.parametrize(
    ("state", "reason", "shown"),
    [
        ("running", "pending: Resources", "queued"),
        ("running", "planned on gpu.t4", "running"),
        ("waiting", "pending: Resources", "waiting"),  # only a handed-over step can be queued
    ],
    ids=["engine-queues-it", "engine-runs-it", "not-handed-over"],
)
def test_shown_state(state: str, reason: str, shown: str) -> None:
    s = StepRecord("r", "b", state, None, None, (), 1, None, None, None, reason, None)
    assert s.shown_state == shown


@dataclass
class NodeFailing(QueueBackend):
    """The first ``lost`` attempts of ``step`` end with their node (Slurm NODE_FAIL), after
    the container wrote its outputs: a result that must not be taken."""

    step: str = "a"
    lost: int = 1

    def poll(self, run_id: str) -> dict[str, JobState]:
        out = super().poll(run_id)
        for n in range(1, self.lost + 1):
            name = f"hf-{run_id}-{self.step}-{n}"
            if name in out and not out[name].running:
                out[name] = JobState(name, False, 255, "NODE_FAIL", "n1", (), "the node failed", node_failed=True)
        return out


FLAT = """
a:
  image: x
  outputs: [o]
b:
  needs: [a]
  image: x
"""


@pytest.mark.parametrize(
    ("lost", "state", "a_runs"),
    [(1, "succeeded", 2), (3, "succeeded", 4), (4, "failed", 4)],
    ids=["once", "three-times", "past-the-bound"],
)
def test_a_step_whose_node_fails_runs_again_outside_its_retries_and_succeeds_once(
    tmp_path: Path, lost: int, state: str, a_runs: int
) -> None:
    w = world(tmp_path, FLAT, outcomes={"a": [Outcome(files={"o": str(i).encode()}) for i in range(1, 6)]})
    backend = NodeFailing(w.engine, lost=lost)
    assert cluster_runner(w, backend).execute() == ("succeeded" if state == "succeeded" else "failed")
    rid = w.run.id
    a = w.store.attempts(rid, "a")
    assert [s.step for s in w.script.log].count("a") == a_runs  # retries: 0, yet it ran again
    assert [x.state for x in a] == ["failed"] * min(lost, a_runs) + ["succeeded"] * (a_runs - lost)
    assert all("NODE_FAIL on n1" in x.message for x in a[: min(lost, NODE_FAULT_REQUEUES)])
    # past the bound, a node fault is the attempt's failure, charged to its retries (0)
    assert all("the node failed" in x.message for x in a[NODE_FAULT_REQUEUES:lost])
    assert w.step("a").state == state
    if state == "succeeded":
        # the result taken is the attempt that ended well, once: not the lost ones' outputs
        out = RunPaths(Path(w.store.run(rid).workdir)).step_out("a")
        assert (out / "o").read_bytes() == str(a_runs).encode()
        assert sum(e.message.endswith("succeeded") for e in w.store.events(rid) if e.step == "a") == 1


def test_the_node_fault_bound_holds_across_a_resume(tmp_path: Path) -> None:
    # every attempt up to the 5th loses its node: the first session requeues three (the
    # bound), the 4th is the step's failure; a resume gives the step its retries again, but
    # not its node-fault requeues, counted from the recorded attempts
    outcomes = {"a": [Outcome(files={"o": str(i).encode()}) for i in range(1, 8)]}
    w = world(tmp_path, FLAT, outcomes=outcomes)
    backend = NodeFailing(w.engine, lost=5)
    assert cluster_runner(w, backend).execute() == "failed"
    assert w.store.node_faults(w.run.id, "a") == NODE_FAULT_REQUEUES
    assert "a" in reset_for_resume(w.store, w.run.id, lambda step: [], edges_of(w.loaded.workflow))
    assert cluster_runner(w, backend).execute() == "failed"  # before: a 4th requeue, then a success
    a = w.store.attempts(w.run.id, "a")
    assert len(a) == 5 and a[-1].state == "failed" and "the node failed" in a[-1].message
    assert w.store.node_faults(w.run.id, "a") == NODE_FAULT_REQUEUES


# --- only the accepted attempt writes (issue 37) ---------------------------------------------

# b's first attempt waits for a file that the test writes once b's second attempt is accepted;
# each writes its attempt number.  c reads b's output a while later.
LATE = """
b:
  image: x
  command: [sh, -c, 'until test -f /out/go; do sleep 1; done; echo $HETFLOW_ATTEMPT > /out/o']
  outputs: [o]
c:
  needs: [b]
  image: x
  command: [sh, -c, 'sleep 60; echo ok > /out/o']
  outputs: [o]
"""
ONE_NODE = (MachineClass("n1", 1, 8, 32 << 30), MachineClass("n2", 1, 8, 32 << 30))


def placed(steps: dict[str, str]) -> dict[str, Placement]:
    """Each step on its class (one node each: the engine is told that node)."""
    return {s: Placement(s, "default", f"{c}-0", c, 0.0, 1.0, 1.0, 0) for s, c in steps.items()}


def test_a_lost_attempt_that_ends_after_its_retry_was_accepted_leaves_the_steps_outputs_alone(tmp_path: Path) -> None:
    w = world(tmp_path, LATE)
    state = FakeState(clock=w.clock)
    backend = FakeBackend(state, holds_dependencies=True, cluster=True)
    rid = w.run.id
    work = RunPaths(Path(w.run.workdir))
    seen: list[str] = []

    def sleep(seconds: float) -> None:
        """The world between two turns of the runner: b's node loses its engine under attempt 1
        (which runs on), attempt 2 is let through, and attempt 1 only once 2 was accepted."""
        w.clock.sleep(seconds)
        if not seen and backend.poll(rid).get(f"hf-{rid}-b-1", None) is not None:
            seen.extend(state.lose_node())
        if (go := work.staging("b", 2)).is_dir():
            (go / "go").touch()
        if w.step("b").state == "succeeded" and work.staging("b", 1).is_dir():
            (work.staging("b", 1) / "go").touch()

    runner = compose_runner(
        store=w.store,
        node=w.node,
        workflow=w.loaded.workflow,
        run=w.store.run(rid),
        backend=backend,
        options=RunOptions(config=w.config, placements=placed({"b": "n1", "c": "n1"}), classes=ONE_NODE),
        seams=ProcessSeams(clock=w.clock, sleep=sleep, pid=4242, alive=lambda p: False),
    )
    assert runner.execute() == "succeeded"
    assert seen == [f"hf-{rid}-b-1"]
    (record,) = w.store.outputs(rid, "b")
    assert (work.step_out("b") / "o").read_text() == "2\n"
    assert sha256_of(work.step_out("b") / "o") == record.sha256
    assert (work.staging("b", 1) / "o").read_text() == "1\n"  # it ran to its end, in its own folder
    first = w.store.attempts(rid, "b")[0]
    assert first.state == "failed" and "attempt 1 ended after attempt 2 holds the step" in first.message, first
    assert any(e.kind == "discarded" for e in w.store.events(rid) if e.step == "b")


# a's node fails under it; d, planned on the same node and held behind a, is dropped with it
SAME_NODE = """
a:
  image: x
  outputs: [o]
d:
  needs: [a]
  image: x
"""


@dataclass
class DropsWithItsNode(NodeFailing):
    """As Slurm does: a job held behind one its node ended is dropped (DependencyNeverSatisfied)."""

    def _release_ready(self) -> None:
        states = self.engine.states(next(iter(self.jobs.values())).run_id) if self.jobs else {}
        for n in range(1, self.lost + 1):
            name = next((j for j in self.jobs if j.endswith(f"-{self.step}-{n}")), None)
            if name is not None and name in states and not states[name].running:
                self.dropped.add(name)
        super()._release_ready()


def test_a_step_planned_on_a_node_that_failed_under_another_step_is_placed_elsewhere(tmp_path: Path) -> None:
    w = world(tmp_path, SAME_NODE, outcomes={"a": [Outcome(files={"o": b"1"}), Outcome(files={"o": b"2"})]})
    backend = DropsWithItsNode(w.engine)
    runner = cluster_runner(w, backend, placed({"a": "n1", "d": "n1"}), ONE_NODE)
    assert runner.execute() == "succeeded"
    rid = w.run.id
    assert f"hf-{rid}-d-1" in backend.dropped and backend.jobs[f"hf-{rid}-d-1"].node == "n1"
    # before: pinned to n1 again, where Slurm holds it (ReqNodeNotAvail) until the node is back
    assert backend.jobs[f"hf-{rid}-d-2"].node == "n2"
    assert w.step("d").node == "n2"
    said = [e.message for e in w.store.events(rid) if e.step == "d"]
    assert any("on n2 (moved: node n1 failed in this run)" in m for m in said), said
