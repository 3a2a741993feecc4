"""Stop and resume: a killed executor leaves a store that a new one repairs exactly."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from hetflow.errors import StateError
from hetflow.execute import make_backend, reset_for_resume, stop_run
from hetflow.execute.backends.local.fakeengine import FakeEngine
from hetflow.execute.data.outputs import damaged_outputs
from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.engine import ContainerSpec, ContainerState
from hetflow.spec.validate.checks import edges_of
from hetflow.state.models import FAILED, LAUNCHING, PENDING, RUNNING, SKIPPED, STOPPED, SUCCEEDED
from tests.unit.builders import Crash, Outcome, World, gpu, node, world


def crash_at(w: World, when: float) -> None:
    """Run the first executor (pid 4242) until it is killed at ``when``."""
    w.clock.crash_at = when
    with pytest.raises(Crash):
        w.execute(pid=4242)


def names_started(w: World) -> list[str]:
    return [s.spec.name for s in w.script.log]


# --- resume after a crash ---------------------------------------------------------------


def test_a_container_still_running_is_adopted_not_started_twice(tmp_path: Path) -> None:
    g = gpu(0)
    w = world(
        tmp_path,
        "a:\n  image: x\n  resources: {gpus: 1}\n  outputs: [m]\nb:\n  image: x\n  inputs: {m: a/m}\n",
        node_=node(gpus=(g,)),
        outcomes={"a": [Outcome(0, 10, files={"m": b"data"})]},
    )
    crash_at(w, 1003.0)
    assert (w.store.step(w.run.id, "a").state, [x.pid for x in w.store.leases()]) == (RUNNING, [4242])

    seen_pids: list[list[int]] = []
    w.clock.at[1005.0] = lambda: seen_pids.append([x.pid for x in w.store.leases()])
    assert w.execute(pid=4343) == "succeeded"

    a = container_name(w.run.id, "a", 1)
    assert names_started(w) == [a, container_name(w.run.id, "b", 1)]  # a started once
    assert seen_pids == [[4343]]  # the new executor took over the GPU lease
    assert w.store.leases() == []
    assert f"adopted running container {a}" in [e.message for e in w.store.events(w.run.id)]
    assert [(x.attempt, x.state, x.exit_code) for x in w.store.attempts(w.run.id, "a")] == [(1, SUCCEEDED, 0)]
    assert w.script.starts("b")[0].inputs == {"/in/m/m": b"data"}
    assert w.store.run(w.run.id).pid is None


def test_a_finished_container_left_by_the_last_executor_is_removed_and_one_in_flight_adopted(tmp_path: Path) -> None:
    """Containers are removed in batches after their results are stored, so a crash can
    leave one of a finished step: the next executor removes it, and only it."""
    w = world(
        tmp_path,
        "a:\n  image: x\n  outputs: [m]\nb:\n  image: x\n  inputs: {m: a/m}\n",
        outcomes={"a": [Outcome(0, 1, files={"m": b"data"})], "b": [Outcome(0, 10)]},
    )
    crash_at(w, 1004.0)
    assert (w.step("a").state, w.step("b").state) == (SUCCEEDED, RUNNING)
    a, b = container_name(w.run.id, "a", 1), container_name(w.run.id, "b", 1)
    w.engine.start(w.script.starts("a")[0].spec)  # a's container, as if its removal never ran
    assert a in w.engine.states(w.run.id)

    assert w.execute(pid=4343) == "succeeded"

    assert a not in w.engine.containers and b not in w.engine.containers
    assert names_started(w) == [a, b, a]  # b adopted, not started again (the third is the test's)
    assert any(
        e.message.startswith(f"removed 1 finished container(s) the last executor left: {a}")
        for e in w.store.events(w.run.id)
    )


def test_a_gang_network_left_without_its_containers_is_removed_and_one_in_flight_kept(tmp_path: Path) -> None:
    """A gang's containers are removed before its network, in the background: a kill -9
    between the two leaves a network no container names (seen in the chaos test). The next
    executor removes networks of this run's attempts that are over, never one in flight."""
    from hetflow.execute.gang.replicas import network_name

    w = world(
        tmp_path,
        "a:\n  image: x\n  outputs: [m]\nb:\n  image: x\n  inputs: {m: a/m}\n",
        outcomes={"a": [Outcome(0, 1, files={"m": b"data"})], "b": [Outcome(0, 10)]},
    )
    crash_at(w, 1004.0)
    a, b = container_name(w.run.id, "a", 1), container_name(w.run.id, "b", 1)
    w.engine.networks[network_name(a)] = True  # a finished gang's, its containers already gone
    w.engine.networks[network_name(b)] = True  # b's attempt is in flight: adopted, its network kept
    other = network_name(container_name("0ther0000", "a", 1))
    w.engine.networks[other] = True  # another run's
    seen: list[set[str]] = []
    remove = w.engine.remove_network

    def removing(name: str) -> None:
        seen.append({name, *(n for n in w.engine.networks if n == network_name(b))})
        remove(name)

    w.engine.remove_network = removing  # type: ignore[method-assign]
    assert w.execute(pid=4343) == "succeeded"
    assert seen and seen[0] == {network_name(a), network_name(b)}  # a's went first, while b's stayed
    assert other in w.engine.networks
    assert any(
        e.message.startswith("removed 1 gang network(s) the last executor left") for e in w.store.events(w.run.id)
    )


def test_the_first_executor_of_a_run_lists_no_networks_and_the_next_one_does(tmp_path: Path) -> None:
    """No executor ran a new run before, so none left a gang network: its first executor does
    not ask the engine for them (``podman network ls``: issue 43); one after a crash does."""
    w = world(tmp_path, "a:\n  image: x\n  outputs: [m]\n", outcomes={"a": [Outcome(0, 10, files={"m": b"m"})]})
    listed: list[int] = []
    run_networks = w.engine.run_networks

    def listing() -> dict[str, str]:
        listed.append(1)
        return run_networks()

    w.engine.run_networks = listing  # type: ignore[method-assign]
    crash_at(w, 1004.0)
    assert listed == []
    assert w.execute(pid=4343) == "succeeded"
    assert listed == [1]


COLLECTED = [
    pytest.param([Outcome(0, 5, files={"m": b"ok"})], [(1, SUCCEEDED, 0)], 0, id="exit-0-outputs-accepted"),
    pytest.param(
        [Outcome(3, 5), Outcome(0, 1, files={"m": b"ok"})],
        [(1, FAILED, 3), (2, SUCCEEDED, 0)],
        3,
        id="exit-3-collected-then-retried",
    ),
]


@pytest.mark.parametrize(("outcomes", "attempts", "code"), COLLECTED)
def test_a_container_that_finished_while_down_has_its_exit_code_collected(
    tmp_path: Path, outcomes: list[Outcome], attempts: list[tuple[int, str, int]], code: int
) -> None:
    w = world(tmp_path, "a:\n  image: x\n  retries: 1\n  outputs: [m]\n", outcomes={"a": outcomes})
    crash_at(w, 1002.0)
    w.clock.now = 1020.0  # hetflow stays down while the container ends

    assert w.execute(pid=4343) == "succeeded"

    assert [(x.attempt, x.state, x.exit_code) for x in w.store.attempts(w.run.id, "a")] == attempts
    name = container_name(w.run.id, "a", 1)
    assert f"{name} finished while hetflow was down (exit {code})" in [e.message for e in w.store.events(w.run.id)]
    assert w.script.starts("a")[0].spec.name == name
    assert len(w.script.starts("a")) == len(attempts)
    assert (RunPaths(Path(w.run.workdir)).step_out("a") / "m").read_bytes() == b"ok"


@dataclass
class DyingEngine:
    """Dies (the executor is killed) after the intent was stored, before the engine ran it."""

    inner: FakeEngine
    name: str = "dying"

    def image_exists(self, image: str) -> bool:
        return True

    def start(self, spec: ContainerSpec) -> None:
        raise Crash(f"killed before {spec.name} started")

    def states(self, run_id: str) -> dict[str, ContainerState]:
        return self.inner.states(run_id)

    def stop(self, names: Iterable[str], timeout: int = 10) -> None:
        self.inner.stop(names, timeout)

    def remove(self, names: Iterable[str]) -> None:
        self.inner.remove(names)

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None


def test_an_intent_without_a_container_is_relaunched_under_the_same_name(tmp_path: Path) -> None:
    g = gpu(0)
    w = world(tmp_path, "a:\n  image: x\n  resources: {gpus: 1}\n", node_=node(gpus=(g,)))
    with pytest.raises(Crash):
        w.execute(pid=4242, engine=DyingEngine(w.engine))
    name = container_name(w.run.id, "a", 1)
    assert w.store.step(w.run.id, "a").state == LAUNCHING
    assert [(x.attempt, x.state, x.container) for x in w.store.attempts(w.run.id, "a")] == [(1, LAUNCHING, name)]
    assert [x.container for x in w.store.leases()] == [name]

    assert w.execute(pid=4343) == "succeeded"

    assert names_started(w) == [name]
    assert [(x.attempt, x.state, x.gpu_uuids) for x in w.store.attempts(w.run.id, "a")] == [(1, SUCCEEDED, (g.uuid,))]
    assert w.store.step(w.run.id, "a").attempts == 1
    assert f"{name} was never started; launching it again" in [e.message for e in w.store.events(w.run.id)]
    assert w.store.leases() == []


def test_a_running_step_whose_container_vanished_while_down_fails_that_attempt(tmp_path: Path) -> None:
    w = world(tmp_path, "a:\n  image: x\n  retries: 1\n", outcomes={"a": [Outcome(0, 10)]})
    crash_at(w, 1002.0)
    name = container_name(w.run.id, "a", 1)
    w.engine.remove([name])

    assert w.execute(pid=4343) == "succeeded"

    first = w.store.attempts(w.run.id, "a")[0]
    assert (first.state, first.exit_code, first.message) == (
        FAILED,
        None,
        f"container {name} disappeared while hetflow was down",
    )


def _vanish(w: World) -> None:
    w.engine.remove([container_name(w.run.id, "a", 1)])


def _keep(w: World) -> None:
    pass


ADOPTED_FAILURES = [
    pytest.param(1003.0, _keep, id="adopted-then-fails"),
    pytest.param(1020.0, _keep, id="failed-while-down"),
    pytest.param(1003.0, _vanish, id="vanished-while-down"),
]


@pytest.mark.parametrize(("resume_at", "meanwhile"), ADOPTED_FAILURES)
def test_an_attempt_in_flight_at_a_crash_counts_against_the_retry_budget(
    tmp_path: Path, resume_at: float, meanwhile: Callable[[World], None]
) -> None:
    w = world(tmp_path, "a:\n  image: x\n", outcomes={"a": [Outcome(3, 10), Outcome(0, 1)]})
    crash_at(w, 1002.0)
    w.clock.now = resume_at
    meanwhile(w)

    assert w.execute(pid=4343) == "failed"

    assert [x.attempt for x in w.store.attempts(w.run.id, "a")] == [1]
    assert "retry 0 of 0" not in " ".join(e.message for e in w.store.events(w.run.id))


def test_a_relaunched_intent_counts_against_the_retry_budget(tmp_path: Path) -> None:
    w = world(tmp_path, "a:\n  image: x\n", outcomes={"a": [Outcome(3, 1), Outcome(0, 1)]})
    with pytest.raises(Crash):
        w.execute(pid=4242, engine=DyingEngine(w.engine))

    assert w.execute(pid=4343) == "failed"

    assert [x.attempt for x in w.store.attempts(w.run.id, "a")] == [1]


# --- stop ------------------------------------------------------------------------------

STOP_WORKFLOW = """
long:
  image: x
  resources: {gpus: 1}
short:
  image: x
flaky:
  image: x
  retries: 3
after:
  image: x
  needs: [long]
"""


def test_stop_run_stops_containers_and_marks_live_steps_stopped(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        STOP_WORKFLOW,
        node_=node(gpus=(gpu(0),)),
        outcomes={"long": [Outcome(0, 100)], "short": [Outcome(0, 1)], "flaky": [Outcome(1, 1)]},
    )
    stopped: list[list[str]] = []
    w.clock.at[1005.0] = lambda: stopped.append(
        stop_run(w.store, make_backend(engine=w.engine), w.run.id, alive=lambda pid: False)
    )

    assert w.execute() == "stopped"

    long = container_name(w.run.id, "long", 1)
    assert stopped == [[long]]
    steps = {s.step: s for s in w.store.steps(w.run.id)}
    assert {k: s.state for k, s in steps.items()} == {
        "long": STOPPED,
        "short": SUCCEEDED,
        "flaky": STOPPED,  # waiting for its next retry
        "after": PENDING,  # never started: resume runs it
    }
    assert steps["long"].reason == "stopped by hetflow stop"
    assert [(a.state, a.exit_code) for a in w.store.attempts(w.run.id, "long")] == [(STOPPED, 137)]
    run = w.store.run(w.run.id)
    assert (run.state, run.pid, run.message) == ("stopped", None, "stopped by hetflow stop")
    assert w.store.leases() == []
    assert long not in w.engine.containers


def test_a_stopped_run_resumes_and_finishes(tmp_path: Path) -> None:
    w = world(tmp_path, STOP_WORKFLOW, node_=node(gpus=(gpu(0),)), outcomes={"long": [Outcome(0, 100), Outcome(0, 2)]})
    w.clock.at[1005.0] = lambda: stop_run(w.store, make_backend(engine=w.engine), w.run.id, alive=lambda pid: False)
    assert w.execute() == "stopped"

    reset = reset_for_resume(w.store, w.run.id, lambda step: [], edges_of(w.loaded.workflow))

    assert reset == ["long"]
    assert w.execute(pid=4343) == "succeeded"
    assert [(s.step, s.attempt) for s in w.script.log if s.step == "long"] == [("long", 1), ("long", 2)]


# --- reset for resume ------------------------------------------------------------------

RESET_WORKFLOW = """
a:
  image: x
  outputs: [m.txt]
b:
  image: x
  inputs: {m: a/m.txt}
  outputs: [r.txt]
c:
  image: x
  outputs: [c.txt]
"""


def _modify(path: Path) -> None:
    path.write_bytes(b"edited by hand")


def _delete(path: Path) -> None:
    path.unlink()


RESETS = [
    pytest.param("a", _modify, ["a", "b"], {"a": 2, "b": 2, "c": 1}, id="modified-output-reruns-step-and-descendants"),
    pytest.param("b", _delete, ["b"], {"a": 1, "b": 2, "c": 1}, id="deleted-output-reruns-only-that-leaf"),
    pytest.param("c", None, [], {"a": 1, "b": 1, "c": 1}, id="intact-outputs-rerun-nothing"),
]


@pytest.mark.parametrize(("step", "damage", "reset", "starts"), RESETS)
def test_reset_for_resume_reruns_damaged_steps_and_their_descendants(
    tmp_path: Path,
    step: str,
    damage: Callable[[Path], None] | None,
    reset: list[str],
    starts: dict[str, int],
) -> None:
    w = world(
        tmp_path,
        RESET_WORKFLOW,
        outcomes={
            "a": [Outcome(files={"m.txt": b"m"})],
            "b": [Outcome(files={"r.txt": b"r"})],
            "c": [Outcome(files={"c.txt": b"c"})],
        },
    )
    assert w.execute() == "succeeded"
    if damage:
        damage(Path(w.store.outputs(w.run.id, step)[0].path))

    got = reset_for_resume(
        w.store, w.run.id, lambda s: damaged_outputs(w.store.outputs(w.run.id, s)), edges_of(w.loaded.workflow)
    )

    assert got == reset
    assert {s.step: s.state for s in w.store.steps(w.run.id)} == {
        name: PENDING if name in reset else SUCCEEDED for name in ("a", "b", "c")
    }
    assert w.execute(pid=4343) == "succeeded"
    assert {name: len(w.script.starts(name)) for name in ("a", "b", "c")} == starts
    assert damaged_outputs(w.store.outputs(w.run.id)) == []
    if reset:
        assert f"recorded output(s) {'m.txt' if step == 'a' else 'r.txt'} missing or changed; the step runs again" in [
            e.message for e in w.store.events(w.run.id)
        ]


def test_reset_for_resume_sends_failed_and_skipped_steps_back_to_pending(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        "bad:\n  image: x\nafter:\n  image: x\n  needs: [bad]\nfine:\n  image: x\n",
        outcomes={"bad": [Outcome(2, 1), Outcome(0, 1)]},
    )
    assert w.execute() == "failed"
    assert [(s.step, s.state) for s in w.store.steps(w.run.id)] == [
        ("bad", FAILED),
        ("after", SKIPPED),
        ("fine", SUCCEEDED),
    ]

    assert reset_for_resume(w.store, w.run.id, lambda s: [], edges_of(w.loaded.workflow)) == ["after", "bad"]

    bad = w.store.step(w.run.id, "bad")
    assert (bad.state, bad.exit_code, bad.reason, bad.ended, bad.attempts) == (PENDING, None, "", None, 1)
    assert w.execute(pid=4343) == "succeeded"
    assert [s.spec.name for s in w.script.starts("bad")] == [
        container_name(w.run.id, "bad", 1),
        container_name(w.run.id, "bad", 2),
    ]


def test_reset_for_resume_only_retries_one_failed_step_and_what_it_skipped(tmp_path: Path) -> None:
    """``hetflow resume RUN --step S`` (the dashboard's retry): the other failed step stays failed."""
    w = world(
        tmp_path,
        "bad:\n  image: x\nafter:\n  image: x\n  needs: [bad]\nworse:\n  image: x\nfine:\n  image: x\n",
        outcomes={"bad": [Outcome(2, 1), Outcome(0, 1)], "worse": [Outcome(3, 1)]},
    )
    assert w.execute() == "failed"
    edges = edges_of(w.loaded.workflow)

    assert reset_for_resume(w.store, w.run.id, lambda s: [], edges, only="bad") == ["after", "bad"]

    assert {s.step: s.state for s in w.store.steps(w.run.id)} == {
        "bad": PENDING,
        "after": PENDING,
        "worse": FAILED,
        "fine": SUCCEEDED,
    }
    assert w.execute(pid=4343) == "failed"  # worse still failed: the run did not succeed
    assert w.store.step(w.run.id, "after").state == SUCCEEDED
    assert len(w.script.starts("worse")) == 1


@pytest.mark.parametrize(
    ("only", "message"),
    [
        ("fine", "step 'fine' of run .* is succeeded: only a failed or stopped step can be retried"),
        ("nope", "no step 'nope'"),
    ],
)
def test_reset_for_resume_only_refuses_a_step_that_did_not_fail(tmp_path: Path, only: str, message: str) -> None:
    w = world(tmp_path, "bad:\n  image: x\nfine:\n  image: x\n", outcomes={"bad": [Outcome(2, 1)]})
    assert w.execute() == "failed"
    with pytest.raises(StateError, match=message):
        reset_for_resume(w.store, w.run.id, lambda s: [], edges_of(w.loaded.workflow), only=only)
    assert w.store.step(w.run.id, "bad").state == FAILED  # nothing reset


@pytest.mark.parametrize(
    ("state", "alive"),
    [("R", True), ("S", True), ("Z", False), ("X", False)],
    ids=["running", "sleeping", "zombie", "dead"],
)
def test_pid_alive_treats_a_zombie_as_dead(tmp_path: Path, state: str, alive: bool) -> None:
    """A killed executor nobody reaps stays a zombie yet answers kill(0): resume must not wait on it."""
    from hetflow.execute import pid_alive

    pid = os.getpid()
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "stat").write_text(f"{pid} (hetflow (x)) {state} 1 1 1 0 -1\n")
    assert pid_alive(pid, tmp_path) is alive


@pytest.mark.parametrize(
    ("flags", "status", "alive"),
    [
        (0x400040, "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", True),
        (0x400044, "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", False),
        (0x400040, "SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", False),
        (0x400040, "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", False),
        (0x400040, "SigPnd:\t0000000000004000\nShdPnd:\t0000000000000002\n", True),
    ],
    ids=["running", "exiting", "sigkill-queued", "sigkill-queued-shared", "other-signals-queued"],
)
def test_pid_alive_treats_a_process_dying_of_sigkill_as_gone(
    tmp_path: Path, flags: int, status: str, alive: bool
) -> None:
    """kill(2) returns before a SIGKILLed process is gone; ``kill -9; hetflow resume`` must not
    be refused while the kernel finishes it (the gang test's CI failure).  A fake /proc here."""
    from hetflow.execute import pid_alive

    pid = os.getpid()
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "stat").write_text(f"{pid} (hetflow) S 1 1 1 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 77 0\n")
    (tmp_path / str(pid) / "status").write_text(f"Name:\thetflow\nState:\tS (sleeping)\n{status}")
    assert pid_alive(pid, tmp_path) is alive


def test_pid_alive_on_a_real_process_right_after_kill_9() -> None:
    """A real child, not reaped: alive before, gone as soon as kill(2) returns, whether the
    kernel has finished it (a zombie) or not yet (SIGKILL queued, or exiting)."""
    from hetflow.execute import pid_alive

    child = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()


# --- stop after a crash ------------------------------------------------------------------


def _stop_after_crash_finished_while_down(w: World) -> None:
    crash_at(w, 1002.0)
    w.clock.now = 1020.0  # a's container ends while hetflow is down


def _stop_after_crash_result_stored(w: World) -> None:
    crash_at(w, 1004.0)  # a's result stored, b running; a's container not removed yet
    w.engine.start(w.script.starts("a")[0].spec)
    w.clock.now = 1004.5


STOP_AFTER_CRASH = [
    pytest.param(_stop_after_crash_finished_while_down, RUNNING, id="finished-while-down-kept-for-resume"),
    pytest.param(_stop_after_crash_result_stored, SUCCEEDED, id="result-stored-container-removed"),
]


@pytest.mark.parametrize(("crash", "a_state"), STOP_AFTER_CRASH)
def test_stop_after_a_crash_keeps_finished_results(
    tmp_path: Path, crash: Callable[[World], None], a_state: str
) -> None:
    """Issue 12: `stop` after a crash stopped finished containers as if they ran, and resume
    ran their steps again as attempt 2.  Only attempts still running are stopped."""
    w = world(
        tmp_path,
        "a:\n  image: x\n  outputs: [m]\nb:\n  image: x\n  inputs: {m: a/m}\n",
        outcomes={
            "a": [Outcome(0, 1 if crash is _stop_after_crash_result_stored else 5, files={"m": b"ok"})],
            "b": [Outcome(0, 10)],
        },
    )
    crash(w)
    stop_run(w.store, make_backend(engine=w.engine), w.run.id, alive=lambda pid: False)

    assert w.step("a").state == a_state
    assert not [x for x in w.store.attempts(w.run.id, "a") if x.state == STOPPED]
    a = container_name(w.run.id, "a", 1)
    assert (a in w.engine.containers) is (a_state == RUNNING)  # kept only while its result is uncollected

    reset_for_resume(w.store, w.run.id, lambda step: [], edges_of(w.loaded.workflow))
    assert w.execute(pid=4343) == "succeeded"

    assert [(x.attempt, x.state) for x in w.store.attempts(w.run.id, "a")] == [(1, SUCCEEDED)]
    assert (RunPaths(Path(w.run.workdir)).step_out("a") / "m").read_bytes() == b"ok"
    assert w.engine.containers == {}


def test_a_gang_launch_cut_after_one_replica_is_removed_and_launched_whole_again(tmp_path: Path) -> None:
    """kill -9 between a gang's replicas' starts: one replica runs, the other was never
    made.  The resumed executor removes the part that runs and launches the attempt whole,
    under its name, rather than failing the step for a replica that was never started."""
    from hetflow.execute.gang.replicas import replica_name

    w = world(tmp_path, "a:\n  image: x\n  gang: {replicas: 2}\n")
    real, calls = w.engine.start, []

    def one_then_die(spec: ContainerSpec) -> None:
        calls.append(spec.name)
        if len(calls) == 2:
            raise Crash(f"killed before {spec.name} started")
        real(spec)

    w.engine.start = one_then_die  # type: ignore[method-assign]
    with pytest.raises(Crash):
        w.execute(pid=4242)
    w.engine.start = real  # type: ignore[method-assign]
    a = container_name(w.run.id, "a", 1)
    assert w.store.step(w.run.id, "a").state == LAUNCHING and calls == [a, replica_name(a, 1)]
    assert list(w.engine.states(w.run.id)) == [a]  # replica 0 only

    assert w.execute(pid=4343) == "succeeded"

    assert [(x.attempt, x.state) for x in w.store.attempts(w.run.id, "a")] == [(1, SUCCEEDED)]
    said = [e.message for e in w.store.events(w.run.id)]
    assert f"removed the part of 1 gang launch(es) the last executor did not finish: {a}" in said, said
    assert f"{a} was never started; launching it again" in said
