"""Elastic gangs on the local runner (``execute.gang.elastic``, ``execute.elastic``): the grow
decision as a pure function, and a run on the fake engine (fake clock, fake GPUs) that starts
a gang with the replicas that fit and grows it when another step gives its GPUs back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.config import check_environment
from hetflow.errors import UsageError
from hetflow.execute.gang.elastic import RESIZED, Need, elastic_env, grow_to, sizes, with_replicas
from hetflow.execute.gang.replicas import LABEL_RANK
from hetflow.plan import Placement
from hetflow.state.models import SUCCEEDED
from tests.unit.builders import Crash, Outcome, World, gpu, load_steps, node, world
from tests.unit.test_runner_cluster import CLASSES, QueueBackend, cluster_runner

HALF = Need(0.5, 64 << 20)
GROW = [
    pytest.param(2, Need(1.0, 1 << 30), 0.0, 4, id="two-more-fit"),
    pytest.param(2, Need(0.5, 1 << 30), 0.0, 3, id="one-more-fits"),
    pytest.param(2, Need(0.4, 1 << 30), 0.0, 2, id="none-fits"),
    pytest.param(2, Need(8.0, 100 << 20), 0.0, 3, id="memory-binds"),
    pytest.param(4, Need(8.0, 1 << 30), 0.0, 4, id="at-max"),
    pytest.param(2, Need(8.0, 1 << 30), -1.0, 2, id="too-soon"),
    pytest.param(2, Need(0.3 + 0.7, 1 << 30), 0.0, 4, id="rounding-still-fits"),
]


@pytest.mark.parametrize(("current", "free", "early", "want"), GROW)
def test_a_gang_grows_to_the_largest_size_whose_added_replicas_all_fit(
    current: int, free: Need, early: float, want: int
) -> None:
    assert grow_to(current, 4, HALF, free, since=30.0 + early, every=30.0) == want


def test_gpus_bind_a_gpu_gang() -> None:
    per = Need(1.0, 1 << 30, 1)
    assert grow_to(2, 4, per, Need(8.0, 8 << 30, 1), since=1, every=0) == 3
    assert grow_to(2, 4, per, Need(8.0, 8 << 30, 0), since=1, every=0) == 2


ELASTIC = """
train:
  image: trainer
  resources: {cpus: 1, memory: 1Gi, gpus: 1}
  outputs: [model.txt]
  checkpoint: {mode: app}
  gang: {replicas: {min: 2, max: 4}, launcher: torch}
"""


def test_sizes_env_and_a_resized_copy() -> None:
    step = load_steps(ELASTIC).workflow.steps["train"]
    assert sizes(step) == [4, 3, 2]
    two = with_replicas(step, 2)
    assert two.replicas == 2 and two.gang is not None and two.gang.elastic == step.gang.elastic  # type: ignore[union-attr]
    assert elastic_env(two, "r1", "train", 1) == {
        "HETFLOW_GANG_MIN": "2",
        "HETFLOW_GANG_MAX": "4",
        "PET_NNODES": "2:4",
        "TORCHELASTIC_RESTART_COUNT": "1",
        "TORCHELASTIC_MAX_RESTARTS": "2",
        "TORCHELASTIC_RUN_ID": "r1-train",
    }
    fixed = load_steps("t: {image: x, gang: {replicas: 2, launcher: torch}}").workflow.steps["t"]
    assert (sizes(fixed), elastic_env(fixed, "r1", "t", 0)) == ([2], {})


def four_gpus(tmp_path: Path, body: str, outcomes: dict[str, list[Outcome]]) -> World:
    machine = node(cpus=8, memory_gib=32, gpus=tuple(gpu(i) for i in range(4)))
    w = world(tmp_path, body, node_=machine, outcomes=outcomes)
    w.config = replace(w.config, grow_every=0.0)
    return w


def test_a_gang_starts_with_what_fits_and_grows_when_gpus_free_up(tmp_path: Path) -> None:
    hog = "\nhog:\n  image: hog\n  resources: {cpus: 1, memory: 1Gi, gpus: 2}\n"
    w = four_gpus(
        tmp_path,
        hog + ELASTIC,  # the hog first: it takes 2 of the 4 GPUs before the gang is decided
        {"hog": [Outcome(duration=10)], "train": [Outcome(duration=1000), Outcome(files={"model.txt": b"m"})]},
    )
    assert w.execute() == "succeeded"
    starts = w.script.starts("train")
    by_attempt = {a: [s.spec for s in starts if s.attempt == a] for a in (1, 2)}
    assert [len(by_attempt[1]), len(by_attempt[2])] == [2, 4]
    for attempt, world_size, restarts in ((1, "2", "0"), (2, "4", "1")):
        for spec in by_attempt[attempt]:
            assert (spec.env["WORLD_SIZE"], spec.env["TORCHELASTIC_RESTART_COUNT"]) == (world_size, restarts)
            assert spec.env["PET_NNODES"] == "2:4" and spec.env["RANK"] == spec.labels[LABEL_RANK]
    # the growth waited for the hog to end, and the four replicas have four different GPUs
    assert min(s.at for s in starts if s.attempt == 2) >= 10
    assert len({d for spec in by_attempt[2] for d in spec.devices}) == 4
    step = w.step("train")
    assert (step.state, step.attempts) == (SUCCEEDED, 2)  # no retries: a growth is not a failure
    first = w.store.attempts(w.run.id, "train")[0]
    assert (first.state, first.message) == ("stopped", RESIZED + "gang train grows from 2 to 4 replicas (GPUs freed)")
    notes = [e.message for e in w.store.events(w.run.id) if e.kind == "elastic"]
    assert notes == ["gang train grows from 2 to 4 replicas (GPUs freed)"]


@pytest.mark.parametrize("stopped", [pytest.param(True, id="stopped-before"), pytest.param(False, id="still-running")])
def test_an_executor_killed_while_a_gang_grows_grows_it_on_resume(tmp_path: Path, stopped: bool) -> None:
    hog = "\nhog:\n  image: hog\n  resources: {cpus: 1, memory: 1Gi, gpus: 2}\n"
    done = Outcome(files={"model.txt": b"m"})
    w = four_gpus(tmp_path, hog + ELASTIC, {"hog": [Outcome(duration=10)], "train": [Outcome(duration=1000), done]})
    real_stop = w.engine.stop
    if not stopped:  # killed after the growth was recorded, before podman stop reached the replicas
        w.engine.stop = lambda names, timeout=10: None  # type: ignore[method-assign]
    w.clock.crash_at = 1010.5  # the hog ends at 1010, the growth is decided in that turn
    with pytest.raises(Crash):
        w.execute(pid=4242)
    assert w.store.attempts(w.run.id, "train")[0].message.startswith(RESIZED)
    w.engine.stop = real_stop  # type: ignore[method-assign]
    assert w.execute(pid=4343) == "succeeded"
    history = w.store.attempts(w.run.id, "train")
    assert [(a.attempt, a.state) for a in history] == [(1, "stopped"), (2, "succeeded")]  # a growth, not a failure
    assert len([s for s in w.script.starts("train") if s.attempt == 2]) == 4


def test_a_gang_that_fits_whole_starts_at_max_and_one_that_never_can_stays_at_what_fits(tmp_path: Path) -> None:
    done = Outcome(duration=5, files={"model.txt": b"m"})
    w = four_gpus(tmp_path, ELASTIC.replace("max: 4", "max: 6"), {"train": [done]})
    assert w.execute() == "succeeded"
    assert len(w.script.starts("train")) == 4  # six never fit on four GPUs: four, and no growth
    assert w.step("train").attempts == 1
    started = [e.message for e in w.store.events(w.run.id) if e.step == "train" and e.message.startswith("attempt 1:")]
    assert len(started) == 1 and "4 of 6 replicas (min 2)" in started[0], started


@pytest.mark.parametrize(("raw", "ok"), [("0", True), ("45.5", True), ("-1", False), ("soon", False)])
def test_grow_every_is_checked_before_any_command(raw: str, ok: bool, tmp_path: Path) -> None:
    env = {"HETFLOW_HOME": str(tmp_path / "home"), "HETFLOW_GROW_EVERY": raw}
    if ok:
        check_environment(env)
        return
    with pytest.raises(UsageError, match=f"HETFLOW_GROW_EVERY={raw!r}: give a number of seconds from 0 to 86400"):
        check_environment(env)


def test_a_cluster_runs_an_elastic_gang_as_a_fixed_gang_of_max(tmp_path: Path) -> None:
    cpu = ELASTIC.replace("gpus: 1}", "gpus: 0}")
    w = world(tmp_path, cpu, outcomes={"train": [Outcome(files={"model.txt": b"m"})]})
    w.config = replace(w.config, grow_every=0.0)
    backend = QueueBackend(w.engine)
    placed = Placement("train", "default", "cpu.std-0", "cpu.std", 0.0, 1.0, 1.0, 0)
    assert cluster_runner(w, backend, {"train": placed}, CLASSES).execute() == "succeeded"
    (job,) = backend.jobs.values()
    assert job.gang is not None and job.gang.replicas == 4 and len(job.ranks) == 4
    assert not [k for r in job.ranks for k in r.env if k.startswith(("PET_", "TORCHELASTIC_", "HETFLOW_GANG_"))]
    assert w.step("train").attempts == 1
