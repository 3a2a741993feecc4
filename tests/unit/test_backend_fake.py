"""The fake backend passes the backend contract, and the contract can fail a backend that breaks it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends import FakeBackend, FakeState, Job, JobState
from hetflow.execute.backends.base import Publish
from hetflow.execute.engine import Mount
from tests.contract import backend_contract
from tests.contract.backend_contract import BUSYBOX, BackendContract, OrderingContract, job
from tests.contract.gang_contract import GangContract
from tests.contract.node_contract import NodeFailureContract, NodeFault


def fast_clock() -> float:
    return time.monotonic() * 20  # the contract's sleeps pass twenty times faster


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(FakeState(clock=fast_clock, images=frozenset({BUSYBOX})), holds_dependencies=True, watches=True)


@pytest.fixture
def fresh_backend(backend: FakeBackend) -> FakeBackend:
    return FakeBackend(backend.state, holds_dependencies=True, watches=True)  # another process, the same engine


class FakeNodeFault:
    """The fake engine's one node fails (``FakeState.fail_node``) and is back at once."""

    def __init__(self, backend: FakeBackend) -> None:
        self.state = backend.state

    def place(self, job: Job) -> Job:
        return job

    def fail(self, node: str) -> None:
        assert self.state.fail_node(), f"nothing ran on {node}"


@pytest.fixture
def node_fault(backend: FakeBackend) -> NodeFault:
    return FakeNodeFault(backend)


class TestFakeBackend(BackendContract, OrderingContract, GangContract, NodeFailureContract):
    LACKS: ClassVar[Mapping[str, str]] = {
        "test_the_next_attempt_runs_on_a_node_still_up": "the fake engine has one node: no other is up for the "
        "next attempt (the runner runs it again after a node failure: tests/unit/test_runner_cluster.py)",
    }

    def test_capabilities(self, backend: FakeBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == ("fake", True, False, False)


# --- the contract fails a backend that breaks it ----------------------------------------


class ZeroExitFake(FakeBackend):
    """Wrong on purpose: says every finished job succeeded."""

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {n: replace(s, exit_code=0) if not s.running else s for n, s in super().poll(run_id).items()}


class UnorderedFake(FakeBackend):
    """Wrong on purpose: claims to hold dependencies but starts every job at once."""

    def submit(self, job: Job) -> None:
        super().submit(replace(job, depends_on=()))


def test_the_contract_fails_a_backend_that_reports_exit_code_0_for_exit_3(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        BackendContract().test_submit_runs_and_reports_exit_code(ZeroExitFake(FakeState(clock=fast_clock)), tmp_path)


def test_the_contract_fails_a_backend_that_does_not_hold_dependencies(tmp_path: Path) -> None:
    wrong = UnorderedFake(FakeState(clock=fast_clock), holds_dependencies=True)
    with pytest.raises(AssertionError):
        OrderingContract().test_dependencies_hold_when_the_engine_orders_jobs(wrong, tmp_path)


class NodeBlindFake(FakeBackend):
    """Wrong on purpose: reports a job whose node failed as the step's own failure."""

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {
            n: replace(s, node_failed=False, exit_code=1 if s.node_failed else s.exit_code)
            for n, s in super().poll(run_id).items()
        }


class HalfGangFake(FakeBackend):
    """Wrong on purpose: starts only replica 0 of a gang."""

    def submit(self, job: Job) -> None:
        super().submit(replace(job, ranks=job.ranks[:1]))


class SilentWatchFake(FakeBackend):
    """Wrong on purpose: says it watches, and never wakes anyone."""

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return lambda: None


def contract_fake(kind: type[FakeBackend]) -> FakeBackend:
    return kind(FakeState(clock=fast_clock, images=frozenset({BUSYBOX})), watches=True)


def test_the_contract_fails_a_backend_that_calls_a_node_failure_the_steps(tmp_path: Path) -> None:
    wrong = contract_fake(NodeBlindFake)
    with pytest.raises(AssertionError, match="node_failed"):
        NodeFailureContract().test_a_job_on_a_failed_node_ends_node_failed(wrong, FakeNodeFault(wrong), tmp_path)


def test_the_contract_fails_a_backend_that_starts_part_of_a_gang(tmp_path: Path) -> None:
    with pytest.raises((AssertionError, FileNotFoundError)):
        GangContract().test_every_replica_runs_sees_its_rank_and_one_name_reports_the_gang(
            contract_fake(HalfGangFake), tmp_path
        )


def test_the_contract_fails_a_backend_whose_watch_never_wakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_contract, "LIMIT", 0.5)  # the wait a silent watcher runs out
    with pytest.raises(AssertionError, match="never woke"):
        BackendContract().test_watch_wakes_when_a_job_ends_or_says_it_cannot(contract_fake(SilentWatchFake), tmp_path)


class SubmittedTimesFake(FakeBackend):
    """Wrong on purpose: reports each job's start as its submission (issue 30's Slurm STARTED)."""

    def submit(self, job: Job) -> None:
        self.__dict__.setdefault("submitted", {})[job.name] = time.time()
        super().submit(job)

    def poll(self, run_id: str) -> dict[str, JobState]:
        at: dict[str, float] = self.__dict__.get("submitted", {})
        return {n: replace(s, started=at.get(n, s.started)) for n, s in super().poll(run_id).items()}


def test_the_contract_fails_a_backend_that_reports_the_submission_as_the_start(tmp_path: Path) -> None:
    wrong = SubmittedTimesFake(FakeState(clock=fast_clock, images=frozenset({BUSYBOX})), holds_dependencies=True)
    with pytest.raises(AssertionError, match="before its parent ended"):
        OrderingContract().test_a_held_jobs_start_is_when_the_engine_started_it(wrong, tmp_path)


# --- the interpreter and the clock ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def run_now(tmp_path: Path, script: str) -> JobState:
    b = FakeBackend(FakeState(clock=Clock()))
    b.submit(job("hf-r-s-1", tmp_path, script, run_id="r"))
    return b.poll("r")["hf-r-s-1"]


@pytest.mark.parametrize(
    ("script", "code"),
    [
        ("true", 0),
        ("false", 1),
        ("exit 3", 3),
        ("exit 300", 44),
        ("true && exit 4", 4),
        ("false && exit 4", 1),
        ("false || exit 5", 5),
        ("false; true", 0),
        ("false && true || exit 6", 6),
        ("test -f /out/missing", 1),
        ("[ -d /out ]", 0),
        ("echo x > /out/f; exit 2; exit 7", 2),
    ],
)
def test_exit_codes_follow_the_shell(tmp_path: Path, script: str, code: int) -> None:
    state = run_now(tmp_path, script)
    assert (state.running, state.exit_code) == (False, code)


def test_echo_writes_into_the_mounted_host_directory_and_appends(tmp_path: Path) -> None:
    assert run_now(tmp_path, "echo a b > /out/f && echo -n c >> /out/f && touch /out/g").exit_code == 0
    assert (tmp_path / "f").read_text() == "a b\nc" and (tmp_path / "g").read_text() == ""


def test_what_it_cannot_interpret_ends_127_and_says_so_in_the_log(tmp_path: Path) -> None:
    state = run_now(tmp_path, "echo hi; wget http://x")
    assert state.exit_code == 127 and "wget: not found" in state.reason
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[0].endswith(" stdout F hi") and lines[1].endswith(" stderr F sh: " + state.reason)
    assert run_now(tmp_path, "sleep 1 &").exit_code == 127


def test_a_read_only_or_unmounted_path_refuses_writes(tmp_path: Path) -> None:
    b = FakeBackend(FakeState(clock=Clock()))
    j = job("hf-r-ro-1", tmp_path, "echo x > /out/f", run_id="r")
    b.submit(replace(j, container=replace(j.container, mounts=(Mount(str(tmp_path), "/out", read_only=True),))))
    b.submit(job("hf-r-no-1", tmp_path, "echo x > /elsewhere/f", run_id="r"))
    states = b.poll("r")
    assert states["hf-r-ro-1"].exit_code == 1 and "Read-only" in states["hf-r-ro-1"].reason
    assert states["hf-r-no-1"].exit_code == 1 and not (tmp_path / "f").exists()


def test_a_job_ends_when_its_sleeps_have_passed(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock))
    b.submit(job("hf-r-s-1", tmp_path, "echo 1 > /out/a; sleep 5; echo 2 > /out/b", run_id="r"))
    clock.now = 4.9
    assert b.poll("r")["hf-r-s-1"].running and (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    clock.now = 5.0
    assert b.poll("r")["hf-r-s-1"].exit_code == 0 and (tmp_path / "b").read_text() == "2\n"


def test_dependencies_wait_and_a_failed_parent_drops_the_child(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock), holds_dependencies=True)
    b.submit(job("hf-r-p-1", tmp_path, "sleep 2; exit 1", run_id="r"))
    b.submit(job("hf-r-c-1", tmp_path, "echo no > /out/c", run_id="r", depends_on=("hf-r-p-1",)))
    child = b.poll("r")["hf-r-c-1"]
    assert (child.running, child.status, child.reason) == (True, "pending", "waiting for hf-r-p-1")
    clock.now = 2
    child = b.poll("r")["hf-r-c-1"]
    assert (child.running, child.exit_code, child.dependency_failed) == (False, None, True)
    assert not (tmp_path / "c").exists()


def test_a_released_parent_still_counts_and_an_unknown_one_is_refused(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock), holds_dependencies=True)
    b.submit(job("hf-r-p-1", tmp_path, "true", run_id="r"))
    b.release(["hf-r-p-1"])
    b.submit(job("hf-r-c-1", tmp_path, "true", run_id="r", depends_on=("hf-r-p-1",)))
    st = b.poll("r")
    assert {n: replace(s, started=None, ended=None) for n, s in st.items()} == {
        "hf-r-c-1": JobState("hf-r-c-1", False, 0, "exited", "fake")
    }
    with pytest.raises(EngineError, match="does not know"):
        b.submit(job("hf-r-d-1", tmp_path, "true", run_id="r", depends_on=("hf-r-x-1",)))


def test_without_holds_dependencies_depends_on_is_left_to_the_runner(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock))
    b.submit(job("hf-r-c-1", tmp_path, "true", run_id="r", depends_on=("hf-r-never-1",)))
    assert b.poll("r")["hf-r-c-1"].exit_code == 0


def test_cancel_ends_running_and_waiting_jobs_and_release_forgets_them(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock), holds_dependencies=True)
    b.submit(job("hf-r-p-1", tmp_path, "sleep 60", run_id="r"))
    b.submit(job("hf-r-c-1", tmp_path, "true", run_id="r", depends_on=("hf-r-p-1",)))
    b.cancel(["hf-r-p-1", "hf-r-c-1"])
    states = b.poll("r")
    assert {n: (s.running, s.exit_code) for n, s in states.items()} == {
        "hf-r-p-1": (False, 143),
        "hf-r-c-1": (False, 143),
    }
    b.release(["hf-r-p-1"])
    assert set(b.poll("r")) == {"hf-r-c-1"}


def test_a_running_name_cannot_be_submitted_again_and_only_sh_c_runs(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock))
    j = job("hf-r-s-1", tmp_path, "sleep 1", run_id="r")
    b.submit(j)
    with pytest.raises(EngineError, match="already running"):
        b.submit(j)
    clock.now = 1
    b.submit(j)  # ended: a new submission replaces it
    with pytest.raises(EngineError, match="only `sh -c SCRIPT`"):
        b.submit(replace(j, name="hf-r-t-1", container=replace(j.container, command=("true",))))


def test_images_exist_unless_the_state_names_them(tmp_path: Path) -> None:
    assert FakeBackend().image_exists("any")
    b = FakeBackend(FakeState(images=frozenset({"a"})))
    assert b.image_exists("a") and not b.image_exists("b")
    assert b.watch("r", lambda: None) is None


def test_an_until_loop_waits_for_its_condition_on_the_clock(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock))
    b.submit(job("hf-r-u-1", tmp_path, "until test -f /out/go; do sleep 1; done; echo in > /out/x", run_id="r"))
    clock.now = 5
    assert b.poll("r")["hf-r-u-1"].running and not (tmp_path / "x").exists()
    (tmp_path / "go").write_text("")
    assert b.poll("r")["hf-r-u-1"].running  # the loop's sleep ends at 6
    clock.now = 6
    assert b.poll("r")["hf-r-u-1"].exit_code == 0 and (tmp_path / "x").read_text() == "in\n"


@pytest.mark.parametrize(
    ("scripts", "published"),
    [
        pytest.param(["echo 0 > /out/x", "true"], True, id="every-replica-ended-0"),
        pytest.param(["echo 0 > /out/x", "exit 4"], False, id="a-replica-failed"),
    ],
)
def test_a_gang_publishes_rank_0s_out_only_when_every_replica_ended_0(
    tmp_path: Path, clock: Clock, scripts: list[str], published: bool
) -> None:
    b = FakeBackend(FakeState(clock=clock), holds_dependencies=True)
    staging, final = tmp_path / "st", tmp_path / "steps" / "g" / "out"
    made = backend_contract.gang_job("hf-r-g-1", staging, scripts, run_id="r")
    b.submit(
        replace(
            made, container=replace(made.container, log_path=None), publish=Publish(str(staging), str(final), ("x",))
        )
    )
    state = b.poll("r")["hf-r-g-1"]
    assert (state.exit_code == 0, final.exists(), staging.exists()) == (published, published, not published), state


# --- a node that loses only its link to the engine (issue 37) ----------------------------


def test_a_job_whose_node_lost_touch_is_reported_lost_and_runs_on_out_of_reach(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock), holds_dependencies=True)
    gated = job("hf-r-s-1", tmp_path / "s", "until test -f /out/go; do sleep 1; done; echo late > /out/o", run_id="r")
    b.submit(gated)
    b.submit(job("hf-r-t-1", tmp_path / "t", "echo ran > /out/o", run_id="r", depends_on=("hf-r-s-1",)))
    assert b.state.lose_node() == ["hf-r-s-1"]
    st = b.poll("r")["hf-r-s-1"]
    assert (st.running, st.node_failed, st.status) == (False, True, "NODE_FAIL")
    assert b.poll("r")["hf-r-t-1"].dependency_failed  # afterok on a lost job: never satisfied
    b.cancel(["hf-r-s-1"], 0)  # cannot reach it
    b.release(["hf-r-s-1"])  # hetflow forgets it; it runs on
    (tmp_path / "s" / "go").touch()
    clock.now += 2
    b.poll("r")
    assert (tmp_path / "s" / "o").read_text() == "late\n"


def test_a_cancel_reaches_a_lost_job_once_its_node_is_back(tmp_path: Path, clock: Clock) -> None:
    b = FakeBackend(FakeState(clock=clock))
    b.submit(job("hf-r-s-1", tmp_path / "s", "until test -f /out/go; do sleep 1; done; echo late > /out/o", run_id="r"))
    b.state.lose_node()
    b.cancel(["hf-r-s-1"], 0)
    b.state.reconnect()
    st = b.poll("r")["hf-r-s-1"]
    assert (st.running, st.exit_code, st.node_failed) == (False, 143, False)
    (tmp_path / "s" / "go").touch()
    clock.now += 2
    b.poll("r")
    assert not (tmp_path / "s" / "o").exists()
