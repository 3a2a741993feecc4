"""Application checkpoints (``checkpoint: {mode: app}``) and each step's ``stop_grace``: the
folder and variable every attempt gets, the SIGUSR1 schedule, the grace each container is
stopped with, and a user's own HETFLOW_CHECKPOINT_DIR refused."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from hetflow.errors import EngineError, SpecError
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.kubernetes import KubernetesSettings, Placement, job_objects
from hetflow.execute.backends.local.backend import LocalBackend
from hetflow.execute.backends.local.fakeengine import FakeEngine
from hetflow.execute.backends.slurm import SlurmSettings
from hetflow.execute.backends.slurm.translate import job_script
from hetflow.execute.checkpoint.app import SaveRequests, SignalsJobs, prepare_app_checkpoint
from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.devices.gpu import GpuAccess
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.execute.run.control.stopping import by_grace, cancel_by_grace, step_graces
from hetflow.execute.run.launch.container import build_spec
from hetflow.spec import CHECKPOINT_ENV, RESERVED_ENV
from tests.unit.builders import Outcome, load_steps, world

WF = load_steps(
    """
    train:
      image: x
      checkpoint: {mode: app, every: 10s}
      stop_grace: 1.5s
      env: {MODE: fast}
    saves:
      image: x
      checkpoint: {mode: app}
    dump:
      image: x
      checkpoint: {every: 1m}
    plain:
      image: x
    """
).workflow


def spec_of(tmp_path: Path, name: str, attempt: int = 1) -> ContainerSpec:
    step = WF.steps[name]
    return build_spec(
        run_id="r1",
        step_name=name,
        step=step,
        variant=step.resolved_variants()["default"],
        attempt=attempt,
        uid=1000,
        gid=100,
        paths=RunPaths(tmp_path),
        access=GpuAccess(),
    )


# --- the folder and the variable ---------------------------------------------------------


def test_every_attempt_of_an_app_step_gets_the_same_folder_read_write(tmp_path: Path) -> None:
    first, third = spec_of(tmp_path, "train", 1), spec_of(tmp_path, "train", 3)
    folder = str(RunPaths(tmp_path).app_checkpoint("train"))

    for spec in (first, third):
        assert Mount(folder, "/checkpoint", read_only=False) in spec.mounts
        assert spec.env[CHECKPOINT_ENV] == "/checkpoint"
        assert spec.env["MODE"] == "fast"


@pytest.mark.parametrize("name", ["dump", "plain"], ids=["criu-mode", "no-checkpoint"])
def test_a_step_not_in_mode_app_gets_neither(tmp_path: Path, name: str) -> None:
    spec = spec_of(tmp_path, name)

    assert CHECKPOINT_ENV not in spec.env
    assert all(m.target != "/checkpoint" for m in spec.mounts)


@pytest.mark.parametrize(
    ("name", "grace"), [("train", 2), ("saves", None)], ids=["rounded-up-to-whole-seconds", "unset"]
)
def test_the_container_carries_its_steps_stop_grace(tmp_path: Path, name: str, grace: int | None) -> None:
    assert spec_of(tmp_path, name).stop_grace == grace


def test_the_folder_is_made_once_and_kept_with_what_an_earlier_attempt_saved(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    folder = prepare_app_checkpoint("train", WF.steps["train"], paths, 0, 0)
    assert folder == paths.app_checkpoint("train") and folder.is_dir()
    (folder / "last.npz").write_bytes(b"state")

    again = prepare_app_checkpoint("train", WF.steps["train"], paths, 0, 0)

    assert again == folder and (folder / "last.npz").read_bytes() == b"state"
    assert prepare_app_checkpoint("plain", WF.steps["plain"], paths, 0, 0) is None
    assert not paths.checkpoints("plain").exists()


def test_a_user_cannot_set_hetflow_checkpoint_dir() -> None:
    assert CHECKPOINT_ENV in RESERVED_ENV  # and so container_env drops it, whatever validate said
    with pytest.raises(SpecError) as info:
        load_steps(
            """
            a:
              image: x
              checkpoint: {mode: app}
              env: {HETFLOW_CHECKPOINT_DIR: /data/mine}
            """
        )

    [problem] = [p for p in info.value.problems if p.severity == "error"]
    assert "step 'a' sets HETFLOW_CHECKPOINT_DIR, which hetflow sets itself" in problem.message
    assert "checkpoint: {mode: app}" in problem.message and problem.line == 7  # the env line


# --- SIGUSR1 every `every` -----------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    step: str
    container: str


@dataclass
class Signalled:
    """A backend that records the signals it is asked to send."""

    sent: list[tuple[tuple[str, ...], str]] = field(default_factory=list)

    def signal(self, names: Iterable[str], sig: str) -> None:
        self.sent.append((tuple(names), sig))


def test_save_requests_come_every_interval_from_when_the_container_was_first_seen() -> None:
    saves = SaveRequests(Signalled(), clock=lambda: 0.0)
    running = [Run("train", "hf-r1-train-1"), Run("saves", "hf-r1-saves-1"), Run("plain", "hf-r1-plain-1")]

    asked = {t: saves.due(running, WF.steps, t) for t in (100.0, 109.9, 110.0, 115.0, 119.0, 120.0, 131.0)}

    # `saves` has no `every` (it saves on SIGTERM only); `plain` is no app step
    assert asked == {
        100.0: [],  # first seen: the interval starts
        109.9: [],
        110.0: ["hf-r1-train-1"],
        115.0: [],
        119.0: [],
        120.0: ["hf-r1-train-1"],
        131.0: ["hf-r1-train-1"],  # a late pass asks once, and the next interval starts from it
    }
    assert saves.due(running, WF.steps, 140.0) == []


def test_a_new_attempt_starts_its_own_interval_and_an_ended_one_is_forgotten() -> None:
    saves = SaveRequests(Signalled(), clock=lambda: 0.0)
    saves.due([Run("train", "hf-r1-train-1")], WF.steps, 0.0)

    assert saves.due([Run("train", "hf-r1-train-2")], WF.steps, 9.0) == []
    assert saves.due([Run("train", "hf-r1-train-2")], WF.steps, 19.0) == ["hf-r1-train-2"]
    # attempt 1 was forgotten when it was gone: seen again, its interval starts anew
    assert saves.due([Run("train", "hf-r1-train-1")], WF.steps, 19.0) == []


def test_tick_sends_sigusr1_through_a_backend_that_can_signal() -> None:
    now = [0.0]
    backend = Signalled()
    saves = SaveRequests(backend, clock=lambda: now[0])
    running = [Run("train", "hf-r1-train-1")]

    assert saves.tick(running, WF.steps) == []
    now[0] = 10.0
    assert saves.tick(running, WF.steps) == ["hf-r1-train-1"]

    assert backend.sent == [(("hf-r1-train-1",), "USR1")]


def test_tick_does_nothing_on_a_backend_that_cannot_signal() -> None:
    class Quiet:
        pass

    saves = SaveRequests(Quiet(), clock=lambda: 50.0)
    saves.every.done("hf-r1-train-1", 0.0)

    assert not isinstance(Quiet(), SignalsJobs)
    assert saves.tick([Run("train", "hf-r1-train-1")], WF.steps) == []


def test_the_local_backend_can_signal_and_skips_an_engine_without_a_cli() -> None:
    backend = LocalBackend(FakeEngine(clock=lambda: 0.0))

    assert isinstance(backend, SignalsJobs)
    backend.signal(["hf-r1-train-1"], "USR1")  # no binary: nothing to run, nothing raised


# --- the grace of each container ----------------------------------------------------------

GRACES = {"train": 60, "quick": 0}


@pytest.mark.parametrize(
    ("jobs", "override", "groups"),
    [
        ([("train", "c1"), ("quick", "c2"), ("plain", "c3")], None, {60: ["c1"], 0: ["c2"], None: ["c3"]}),
        ([("train", "c1"), ("quick", "c2"), ("plain", "c3")], 5, {5: ["c1", "c2", "c3"]}),
        ([("train.0", "c1"), ("train.1", "c2")], None, {60: ["c1", "c2"]}),
        ([("plain.3", "batch"), ("plain.4", "batch")], None, {None: ["batch"]}),
        ([], None, {}),
    ],
    ids=["each-steps-own", "stop-grace-option-wins", "fan-out-items-take-the-parents", "a-batch-once", "nothing"],
)
def test_containers_are_grouped_by_the_grace_they_get(
    jobs: list[tuple[str, str]], override: int | None, groups: dict[int | None, list[str]]
) -> None:
    assert by_grace(jobs, GRACES, override) == groups


def test_the_graces_are_read_from_the_workflow_recorded_with_the_run() -> None:
    assert step_graces(WF.model_dump_json(by_alias=True)) == {"train": 2}
    assert step_graces("not json") == {}


@dataclass
class Cancels:
    """Records each cancel; the first waits until the others have begun (so they overlap)."""

    calls: list[tuple[tuple[str, ...], int | None]] = field(default_factory=list)
    started: threading.Barrier = field(default_factory=lambda: threading.Barrier(2, timeout=10))
    fail: str = ""

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        names = tuple(names)
        self.calls.append((names, grace))
        self.started.wait()  # a second group that waited for the first would break the barrier
        if self.fail in names:
            raise EngineError(f"cannot stop {self.fail}")

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {}


def test_groups_with_different_graces_are_stopped_at_the_same_time() -> None:
    backend = Cancels()

    cancel_by_grace(backend, {60: ["slow"], 0: ["fast"]})  # type: ignore[arg-type]

    assert sorted(backend.calls, key=str) == [(("fast",), 0), (("slow",), 60)]


def test_a_failed_cancel_is_raised_after_the_others_ran() -> None:
    backend = Cancels(fail="slow")

    with pytest.raises(EngineError, match="cannot stop slow"):
        cancel_by_grace(backend, {60: ["slow"], 0: ["fast"]})  # type: ignore[arg-type]
    assert len(backend.calls) == 2


def test_one_group_is_one_cancel_on_the_callers_thread() -> None:
    backend = Cancels(started=threading.Barrier(1))

    cancel_by_grace(backend, {None: ["a", "b"], 5: []})  # type: ignore[arg-type]

    assert backend.calls == [(("a", "b"), None)]


@pytest.mark.parametrize(("grace", "timeout"), [(45, 45), (None, 10)], ids=["the-steps", "settings-stop-timeout"])
def test_a_slurm_job_stops_its_container_with_the_steps_grace(tmp_path: Path, grace: int | None, timeout: int) -> None:
    spec = replace(spec_of(tmp_path, "saves"), stop_grace=grace)
    job = Job(name=spec.name, run_id="r1", step="saves", attempt=1, container=spec, cpus=1, memory=1 << 20)

    script = job_script(job, SlurmSettings(), tmp_path, "/c.conf", "/hooks")

    assert f"stop --ignore -t {timeout} " in script


@pytest.mark.parametrize(("grace", "period"), [(45, 45), (None, 10)], ids=["the-steps", "settings-stop-timeout"])
def test_a_kubernetes_pod_gets_the_steps_grace(tmp_path: Path, grace: int | None, period: int) -> None:
    spec = replace(spec_of(tmp_path, "saves"), stop_grace=grace)
    job = Job(name=spec.name, run_id="r1", step="saves", attempt=1, container=spec, cpus=1, memory=1 << 20)

    [kube] = [o for o in job_objects(job, KubernetesSettings(), Placement()) if o["kind"] == "Job"]

    assert kube["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == period


@dataclass
class TimedStops(FakeEngine):
    """The fake engine, recording the timeout of each ``stop``."""

    stops: list[tuple[tuple[str, ...], int]] = field(default_factory=list)

    def stop(self, names: Iterable[str], timeout: int = 10) -> None:
        names = tuple(sorted(names))
        self.stops.append((names, timeout))
        super().stop(names, timeout)


def test_the_executors_own_stop_on_sigterm_gives_each_step_its_grace(tmp_path: Path) -> None:
    w = world(
        tmp_path,
        """
        slow:
          image: x
          stop_grace: 45s
        quick:
          image: x
        """,
        outcomes={"slow": [Outcome(0, 100)], "quick": [Outcome(0, 100)]},
    )
    engine = TimedStops(clock=w.clock, behave=w.script)
    runner = w.runner(engine=engine)
    w.clock.at[1005.0] = lambda: runner._on_signal(signal.SIGTERM, None)

    assert runner.execute() == "stopped"

    slow, quick = container_name(w.run.id, "slow", 1), container_name(w.run.id, "quick", 1)
    assert sorted(engine.stops) == sorted([((slow,), 45), ((quick,), 10)])  # 10: podman's default
