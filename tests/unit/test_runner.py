"""The local runner on FakeEngine and a fake clock: order, capacity, GPUs, retries, failures."""

from __future__ import annotations

import hashlib
import itertools
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetflow.errors import EngineError
from hetflow.execute.backends.local.fakeengine import FakeEngine
from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.engine import ContainerSpec, ContainerState, Mount
from hetflow.state.models import FAILED, SKIPPED, SUCCEEDED, OutputRecord
from tests.unit.builders import GIB, Outcome, Started, World, gpu, node, world


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def peak(starts: Iterable[Started], weight: Callable[[Started], float | None] = lambda s: 1) -> float:
    """The largest total ``weight`` of containers running at one instant."""
    starts = list(starts)
    return max(
        (sum(weight(o) or 0 for o in starts if o.at <= s.at < o.until) for s in starts),
        default=0,
    )


# --- a DAG in dependency order -----------------------------------------------------------

DAG = """
gen:
  image: gen
  outputs: [m.npy]
pool:
  image: pool
  inputs: {m: gen/m.npy}
  outputs: [stats/r.txt]
report:
  image: report
  needs: [pool]
  inputs: {r: pool/stats/r.txt}
"""


def test_a_dag_runs_in_dependency_order_and_accepts_outputs(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        DAG,
        outcomes={
            "gen": [Outcome(duration=3, files={"m.npy": b"matrix"})],
            "pool": [Outcome(duration=2, files={"stats/r.txt": b"42\n"})],
        },
    )

    assert w.execute() == "succeeded"

    log = w.script.log
    assert [s.step for s in log] == ["gen", "pool", "report"]
    assert [s.at for s in log] == [1000.0, 1003.0, 1005.0]  # each starts at the poll that sees its parent end
    assert log[1].inputs == {"/in/m/m.npy": b"matrix"}
    assert log[2].inputs == {"/in/r/r.txt": b"42\n"}
    paths = RunPaths(Path(w.run.workdir))
    assert w.store.outputs(w.run.id) == [
        OutputRecord(w.run.id, "gen", "m.npy", sha(b"matrix"), 6, str(paths.step_out("gen") / "m.npy")),
        OutputRecord(w.run.id, "pool", "stats/r.txt", sha(b"42\n"), 3, str(paths.step_out("pool") / "stats/r.txt")),
    ]
    assert (paths.step_out("pool") / "stats" / "r.txt").read_bytes() == b"42\n"
    assert not (Path(w.run.workdir) / "attempts" / "gen" / "1").exists()  # staging moved, not copied
    assert [(s.step, s.state, s.attempts, s.exit_code) for s in w.store.steps(w.run.id)] == [
        ("gen", SUCCEEDED, 1, 0),
        ("pool", SUCCEEDED, 1, 0),
        ("report", SUCCEEDED, 1, 0),
    ]
    run = w.store.run(w.run.id)
    assert (run.state, run.message, run.pid, run.ended) == ("succeeded", "all steps succeeded", None, 1006.0)
    assert w.engine.containers == {}  # removed once their results were stored


def test_the_container_spec_carries_the_run_step_and_attempt(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        DAG,
        outcomes={"gen": [Outcome(files={"m.npy": b"m"})], "pool": [Outcome(files={"stats/r.txt": b"r"})]},
    )
    w.execute()

    spec = w.script.starts("pool")[0].spec
    paths = RunPaths(Path(w.run.workdir))
    assert spec.name == container_name(w.run.id, "pool", 1) == f"hf-{w.run.id}-pool-1"
    assert spec.mounts == (
        Mount(str(paths.staging("pool", 1)), "/out", read_only=False),
        Mount(str(paths.step_out("gen") / "m.npy"), "/in/m/m.npy", read_only=True),
    )
    assert {
        k: spec.env[k] for k in ("HETFLOW_RUN_ID", "HETFLOW_STEP", "HETFLOW_ATTEMPT", "NVIDIA_VISIBLE_DEVICES")
    } == {
        "HETFLOW_RUN_ID": w.run.id,
        "HETFLOW_STEP": "pool",
        "HETFLOW_ATTEMPT": "1",
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    assert spec.log_path == str(paths.log("pool", 1))


# --- parallel steps within the node's capacity -------------------------------------------


@dataclass(frozen=True)
class ParallelCase:
    cpus: float
    memory: str
    count: int
    node_cpus: int
    node_gib: int
    peak: int  # most containers running at once
    end: float  # when the last one finishes (each runs 10s)


PARALLEL = [
    pytest.param(ParallelCase(2, "1Gi", 6, 4, 16, 2, 1030.0), id="cpu-bound"),
    pytest.param(ParallelCase(1, "3Gi", 5, 8, 8, 2, 1030.0), id="memory-bound"),
    pytest.param(ParallelCase(0.5, "512Mi", 6, 4, 16, 6, 1010.0), id="fractional-cpus-all-at-once"),
    pytest.param(ParallelCase(4, "1Gi", 3, 4, 16, 1, 1030.0), id="one-at-a-time"),
]


@pytest.mark.parametrize("case", PARALLEL)
def test_independent_steps_run_in_parallel_within_capacity(tmp_path: Path, case: ParallelCase) -> None:
    body = "".join(
        f"s{i}:\n  image: x\n  resources: {{cpus: {case.cpus}, memory: {case.memory}}}\n" for i in range(case.count)
    )
    w = world(
        tmp_path,
        body,
        node_=node(cpus=case.node_cpus, memory_gib=case.node_gib),
        outcomes={f"s{i}": [Outcome(duration=10)] for i in range(case.count)},
    )

    assert w.execute() == "succeeded"

    log = w.script.log
    assert len(log) == case.count
    assert peak(log) == case.peak
    assert peak(log, lambda s: s.spec.cpus) <= case.node_cpus
    assert peak(log, lambda s: s.spec.memory) <= case.node_gib * GIB
    assert max(s.until for s in log) == case.end


# --- GPUs --------------------------------------------------------------------------------


def test_gpu_steps_get_disjoint_gpus_and_a_third_waits(tmp_path: Path) -> None:
    g0, g1 = gpu(0, minor=4), gpu(1, minor=7)
    body = "".join(f"t{i}:\n  image: x\n  resources: {{gpus: 1}}\n" for i in range(3))
    w = world(tmp_path, body, node_=node(gpus=(g0, g1)), outcomes={f"t{i}": [Outcome(duration=10)] for i in range(3)})
    seen: list[str] = []
    w.clock.at[1005.0] = lambda: seen.append(w.store.step(w.run.id, "t2").reason)

    assert w.execute() == "succeeded"

    first, second, third = w.script.log
    assert (first.at, second.at, third.at) == (1000.0, 1000.0, 1010.0)
    assert {first.spec.env["HETFLOW_GPU_UUIDS"], second.spec.env["HETFLOW_GPU_UUIDS"]} == {g0.uuid, g1.uuid}
    assert first.spec.devices == ((g0.device_path, "/dev/nvidia4"),)
    assert second.spec.devices == ((g1.device_path, "/dev/nvidia7"),)
    assert [s.spec.env["CUDA_VISIBLE_DEVICES"] for s in w.script.log] == ["0", "0", "0"]
    assert [(s.step, s.gpus) for s in w.store.steps(w.run.id)] == [("t0", (0,)), ("t1", (1,)), ("t2", (0,))]
    assert seen == ["waiting for resources: default: needs 1 qualifying GPU; 0 free now"]
    assert w.store.leases() == []


def test_a_gpu_leased_by_another_live_process_is_not_used(tmp_path: Path) -> None:
    from hetflow.state.models import Lease

    g0, g1 = gpu(0), gpu(1)
    w = world(tmp_path, "t:\n  image: x\n  resources: {gpus: 1}\n", node_=node(gpus=(g0, g1)))
    # Another hetflow run (pid 4242 is this runner's own pid, so never stale) holds GPU 0.
    assert w.store.acquire_gpus([g0.uuid], Lease("", "other", "s", 1, "hf-other-s-1", 4242), [])

    assert w.execute() == "succeeded"

    assert w.script.log[0].spec.env["HETFLOW_GPU_UUIDS"] == g1.uuid
    assert [x.container for x in w.store.leases()] == ["hf-other-s-1"]


# --- retries and failures ----------------------------------------------------------------


def test_a_step_failing_twice_succeeds_on_its_third_attempt_with_doubling_backoff(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        "flaky:\n  image: x\n  retries: 2\n",
        outcomes={"flaky": [Outcome(3, 1), Outcome(3, 1), Outcome(0, 1)]},
    )

    assert w.execute() == "succeeded"

    attempts = w.store.attempts(w.run.id, "flaky")
    assert [(a.attempt, a.state, a.exit_code) for a in attempts] == [(1, FAILED, 3), (2, FAILED, 3), (3, SUCCEEDED, 0)]
    assert [b.started - a.ended for a, b in itertools.pairwise(attempts) if b.started and a.ended] == [2.0, 4.0]
    assert [e.message.split("; ")[-1] for e in w.store.events(w.run.id) if e.kind == "waiting"] == [
        "retry 1 of 2 in 2s",
        "retry 2 of 2 in 4s",
    ]
    assert w.store.step(w.run.id, "flaky").attempts == 3


def test_exhausted_retries_fail_the_step_and_skip_its_dependents(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        """
        flaky:
          image: x
          retries: 1
        after:
          image: x
          needs: [flaky]
        later:
          image: x
          needs: [after]
        other:
          image: x
        """,
        outcomes={"flaky": [Outcome(1, 1, log=("loading", "boom: out of cheese"))]},
    )

    assert w.execute() == "failed"

    steps = {s.step: s for s in w.store.steps(w.run.id)}
    assert (steps["flaky"].state, steps["flaky"].attempts, steps["flaky"].exit_code) == (FAILED, 2, 1)
    assert steps["flaky"].reason == "exited with code 1; last output: loading | boom: out of cheese"
    assert (steps["after"].state, steps["after"].reason) == (SKIPPED, "upstream step 'flaky' failed")
    assert (steps["later"].state, steps["later"].reason) == (SKIPPED, "upstream step 'after' skipped")
    assert steps["other"].state == SUCCEEDED
    assert [s.step for s in w.script.log].count("after") == 0
    # the skipped steps never ran: counted as skipped, not failed (issue 42)
    assert w.store.run(w.run.id).message == "failed: flaky; skipped: after, later"


FAILURES = [
    pytest.param(
        "a:\n  image: x\n  outputs: [m.npy, n.npy]\n",
        Outcome(0, 1, files={"m.npy": b"m"}),
        0,
        "exited 0 but did not write declared output(s) n.npy under /out",
        id="declared-output-not-written",
    ),
    pytest.param(
        "a:\n  image: x\n",
        Outcome(137, 1),
        137,
        "exited with code 137 (killed (SIGKILL: out of memory, or stopped)); hint: exit 137 is an out-of-memory"
        " kill (or a stop); if it ran out of memory, `retry: {count: 1, memory: x2}` on the step asks twice the"
        " memory after each out-of-memory kill",
        id="oom-killed",
    ),
    pytest.param(
        "a:\n  image: x\n",
        Outcome(127, 1),
        127,
        "exited with code 127 (the command was not found in the image)",
        id="command-not-found",
    ),
]


@pytest.mark.parametrize(("body", "outcome", "exit_code", "reason"), FAILURES)
def test_a_failed_attempt_explains_itself(
    tmp_path: Path, body: str, outcome: Outcome, exit_code: int, reason: str
) -> None:
    w = world(tmp_path, body, outcomes={"a": [outcome]})

    assert w.execute() == "failed"

    step = w.store.step(w.run.id, "a")
    assert (step.state, step.exit_code, step.reason) == (FAILED, exit_code, reason)
    assert w.store.outputs(w.run.id) == []
    assert not RunPaths(Path(w.run.workdir)).step_out("a").exists()


@dataclass
class RefusingEngine:
    """A FakeEngine whose first ``refuse`` starts fail, as podman does with a bad image."""

    inner: FakeEngine
    refuse: int = 1
    name: str = "refusing"

    def image_exists(self, image: str) -> bool:
        return True

    def start(self, spec: ContainerSpec) -> None:
        if self.refuse:
            self.refuse -= 1
            raise EngineError(f"podman could not start {spec.name}: OCI runtime error")
        self.inner.start(spec)

    def states(self, run_id: str) -> dict[str, ContainerState]:
        return self.inner.states(run_id)

    def stop(self, names: Iterable[str], timeout: int = 10) -> None:
        self.inner.stop(names, timeout)

    def remove(self, names: Iterable[str]) -> None:
        self.inner.remove(names)

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return self.inner.watch(run_id, wake)


def test_an_engine_refusing_to_start_is_a_failed_attempt_that_is_retried(tmp_path: Path) -> None:
    w = world(tmp_path, "a:\n  image: x\n  retries: 1\n")

    assert w.execute(engine=RefusingEngine(w.engine)) == "succeeded"

    attempts = w.store.attempts(w.run.id, "a")
    assert [(a.state, a.exit_code) for a in attempts] == [(FAILED, None), (SUCCEEDED, 0)]
    assert attempts[0].message == f"podman could not start hf-{w.run.id}-a-1: OCI runtime error"


def test_a_container_that_disappears_fails_its_attempt(tmp_path: Path) -> None:
    w = world(tmp_path, "a:\n  image: x\n", outcomes={"a": [Outcome(0, 10)]})
    name = container_name(w.run.id, "a", 1)
    w.clock.at[1004.0] = lambda: w.engine.remove([name])  # someone ran `podman rm -f`

    assert w.execute() == "failed"

    assert w.store.step(w.run.id, "a").reason == f"container {name} disappeared"


NO_FIT = [
    pytest.param("true", "succeeded", SKIPPED, id="optional-is-skipped"),
    pytest.param("false", "failed", FAILED, id="required-fails"),
]


@pytest.mark.parametrize(("optional", "run_state", "step_state"), NO_FIT)
def test_a_step_that_can_never_fit(tmp_path: Path, optional: str, run_state: str, step_state: str) -> None:
    w = world(tmp_path, f"big:\n  image: x\n  optional: {optional}\n  resources: {{cpus: 64}}\nsmall:\n  image: x\n")

    assert w.execute() == run_state

    big = w.store.step(w.run.id, "big")
    assert (big.state, big.reason) == (
        step_state,
        "no variant can run on this machine: default: asks for 64 CPUs; this machine has 4",
    )
    assert [s.step for s in w.script.log] == ["small"]


def test_a_step_waits_for_resources_held_by_a_running_sibling(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        "wide:\n  image: x\n  resources: {cpus: 4}\nnarrow:\n  image: x\n  resources: {cpus: 1}\n",
        outcomes={"wide": [Outcome(0, 5)], "narrow": [Outcome(0, 5)]},
    )
    seen: list[str] = []
    w.clock.at[1002.0] = lambda: seen.append(w.store.step(w.run.id, "narrow").reason)

    assert w.execute() == "succeeded"

    assert seen == ["waiting for resources: default: needs 1 CPUs; 0 free now"]
    assert [(s.step, s.at) for s in w.script.log] == [("wide", 1000.0), ("narrow", 1005.0)]


# --- a property: whatever the steps, no overcommit and no GPU given twice -----------------

STEP = st.tuples(st.sampled_from([0.5, 1, 2, 3, 4]), st.integers(0, 2), st.integers(1, 6))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, min_size=1, max_size=6))
def test_no_node_over_capacity_and_no_gpu_given_twice(steps: list[tuple[float, int, int]]) -> None:
    body = "".join(
        f"s{i}:\n  image: x\n  resources: {{cpus: {c}, memory: 1Gi, gpus: {g}}}\n" for i, (c, g, _) in enumerate(steps)
    )
    with tempfile.TemporaryDirectory() as tmp:
        w: World = world(
            Path(tmp),
            body,
            node_=node(cpus=4, memory_gib=8, gpus=(gpu(0), gpu(1))),
            outcomes={f"s{i}": [Outcome(0, d)] for i, (_, _, d) in enumerate(steps)},
        )
        assert w.execute() == "succeeded"
        log = w.script.log

    assert sorted(s.step for s in log) == sorted(f"s{i}" for i in range(len(steps)))
    assert peak(log, lambda s: s.spec.cpus) <= 4
    for s in log:
        mine = set(filter(None, s.spec.env.get("HETFLOW_GPU_UUIDS", "").split(",")))
        assert len(mine) == steps[int(s.step[1:])][1]
        for o in log:
            if o is not s and o.at <= s.at < o.until:
                theirs = set(filter(None, o.spec.env.get("HETFLOW_GPU_UUIDS", "").split(",")))
                assert not mine & theirs, (s.step, o.step)
