"""The greedy first-fit baseline and the lower bound (its GPU term included)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from bench.data import CANONICAL, TRACES
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.plan.baselines.backfill import slurm_backfill
from hetflow.plan.baselines.firstfit import greedy_first_fit
from hetflow.plan.baselines.kubesched import kube_scheduler
from hetflow.plan.bounds.lower import critical_path, gpu_bound, lower_bound, work_bound
from hetflow.plan.build import build_instance
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Plan, Task
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.sizing.cluster import load_cluster
from hetflow.spec.load.wfcommons import workflow_from_wfcommons
from tests.unit.builders import GIB

ROOT = Path(__file__).resolve().parents[2]
CPU = MachineClass("cpu", 2, 4, 16 * GIB)
GPU = MachineClass("gpu", 1, 8, 32 * GIB, gpus=2)


def cpu_task(name: str, runtime: float, cores: float = 1, classes: tuple[MachineClass, ...] = (CPU,)) -> Task:
    return Task(name, tuple(Option("cpu", c.name, runtime / c.speed, cores, GIB) for c in classes))


def gpu_task(name: str, cpu_runtime: float, gpu_runtime: float) -> Task:
    return Task(
        name,
        (
            Option("cpu", "cpu", cpu_runtime, 1, GIB),
            Option("cpu", "gpu", cpu_runtime, 1, GIB),
            Option("gpu", "gpu", gpu_runtime, 2, GIB, gpus=1),
        ),
    )


def instance(
    tasks: Sequence[Task],
    edges: Sequence[Edge] = (),
    classes: tuple[MachineClass, ...] = (CPU,),
    *,
    bandwidth: float = 1.25e9,
    one_task_per_machine: bool = False,
) -> Instance:
    return Instance(tuple(tasks), tuple(edges), classes, bandwidth, one_task_per_machine)


def where(plan: Plan, name: str) -> tuple[str, str, float, float]:
    p = plan.placements[name]
    return p.variant, p.machine, p.start, p.finish


# --- greedy: the rule, case by case ------------------------------------------------------


def test_first_machine_in_cluster_order_that_fits_now() -> None:
    plan = greedy_first_fit(instance([cpu_task(f"t{i}", 10, cores=2) for i in range(5)]))

    # cpu-0 takes two 2-core tasks, cpu-1 the next two; the fifth waits for the first finish
    assert [where(plan, f"t{i}")[1:] for i in range(5)] == [
        ("cpu-0", 0, 10),
        ("cpu-0", 0, 10),
        ("cpu-1", 0, 10),
        ("cpu-1", 0, 10),
        ("cpu-0", 10, 20),
    ]
    assert plan.makespan == 20 and plan.algorithm == "greedy-first-fit"


def test_gpu_variant_while_a_gpu_is_free_else_cpu_variant() -> None:
    plan = greedy_first_fit(instance([gpu_task(f"g{i}", 100, 10) for i in range(3)], classes=(CPU, GPU)))

    assert where(plan, "g0") == ("gpu", "gpu-0", 0, 10)
    assert where(plan, "g1") == ("gpu", "gpu-0", 0, 10)
    assert where(plan, "g2") == ("cpu", "cpu-0", 0, 100)  # no look-ahead: both GPUs are busy now
    assert plan.placements["g0"].gpus == (0,) and plan.placements["g1"].gpus == (1,)


def test_no_gpu_free_and_no_cpu_variant_waits_for_the_next_finish() -> None:
    only_gpu = [Task(f"g{i}", (Option("gpu", "gpu", 5, 1, GIB, gpus=2),)) for i in range(2)]
    plan = greedy_first_fit(instance(only_gpu, classes=(CPU, GPU)))

    assert [where(plan, n)[2:] for n in ("g0", "g1")] == [(0, 5), (5, 10)]


def test_a_child_on_its_parents_machine_pays_no_transfer() -> None:
    tasks = [cpu_task("p", 10, cores=4), cpu_task("hog", 100, cores=4), cpu_task("c", 1, cores=4)]
    plan = greedy_first_fit(instance(tasks, [Edge("p", "c", 50.0)], bandwidth=10.0))

    assert where(plan, "hog")[1] == "cpu-1"  # p filled cpu-0
    assert where(plan, "c") == ("cpu", "cpu-0", 10, 11)


def test_a_child_on_another_machine_waits_for_its_data() -> None:
    tasks = [cpu_task("p", 10, cores=4), cpu_task("b", 30, cores=4), cpu_task("c", 1, cores=4)]
    plan = greedy_first_fit(instance(tasks, [Edge("p", "b", 0.0), Edge("p", "c", 50.0)], bandwidth=10.0))

    assert where(plan, "b") == ("cpu", "cpu-0", 10, 40)  # first in order, first machine
    assert where(plan, "c") == ("cpu", "cpu-1", 15, 16)  # bound at 10, starts when 50 B at 10 B/s arrive


def test_one_task_per_machine_runs_one_at_a_time() -> None:
    plan = greedy_first_fit(instance([cpu_task(f"t{i}", 10) for i in range(3)], one_task_per_machine=True))

    assert [where(plan, f"t{i}")[1:] for i in range(3)] == [("cpu-0", 0, 10), ("cpu-1", 0, 10), ("cpu-0", 10, 20)]


# --- greedy: always valid ---------------------------------------------------------------


def seconds(top: int) -> st.SearchStrategy[float]:
    """Half-second steps (0 included): tiny positive floats make check_plan's tolerance moot."""
    return st.integers(0, 2 * top).map(lambda n: n / 2)


@st.composite
def small_instances(draw: st.DrawFn) -> Instance:
    classes = (MachineClass("a", draw(st.integers(1, 2)), 4, 8 * GIB), MachineClass("g", 1, 4, 8 * GIB, gpus=2))
    n = draw(st.integers(1, 8))
    tasks = []
    for i in range(n):
        cores = draw(st.sampled_from([0.5, 1, 2, 4]))
        opts = [Option("cpu", c.name, draw(seconds(20)), cores, draw(st.integers(0, 8)) * GIB) for c in classes]
        if draw(st.booleans()):
            opts.append(Option("gpu", "g", draw(seconds(5)), 1, GIB, gpus=draw(st.integers(1, 2))))
        tasks.append(Task(f"t{i}", tuple(opts)))
    edges = [
        Edge(f"t{j}", f"t{i}", draw(seconds(100))) for i in range(n) for j in range(i) if draw(st.integers(0, 3)) == 0
    ]
    return Instance(tuple(tasks), tuple(edges), classes, bandwidth=10.0, one_task_per_machine=draw(st.booleans()))


@settings(max_examples=200, deadline=None)
@given(small_instances())
def test_greedy_plans_are_valid_and_never_beat_the_lower_bound(inst: Instance) -> None:
    plan = greedy_first_fit(inst)
    assert check_plan(inst, plan) == []
    assert plan.makespan >= lower_bound(inst) - 1e-9


@pytest.mark.parametrize("one_task", [False, True], ids=["hetero-16", "saga-mode"])
@pytest.mark.parametrize("trace", ["1000genome-chameleon-2ch-100k-001", "montage-chameleon-2mass-005d-001"])
def test_greedy_is_valid_on_real_traces(trace: str, one_task: bool) -> None:
    cluster = load_cluster(ROOT / "examples" / "clusters" / "hetero-16.yaml")
    data = json.loads((TRACES / f"{trace}.json").read_text())
    wf = workflow_from_wfcommons(data, gpu_variants=not one_task)
    inst = build_instance(wf, cluster.classes(), bandwidth=cluster.bandwidth_bytes, one_task_per_machine=one_task)

    plan = greedy_first_fit(inst)
    assert check_plan(inst, plan) == []
    assert plan.makespan >= lower_bound(inst)
    assert greedy_first_fit(inst) == plan  # no clock, no randomness


# --- the lower bound, by hand ------------------------------------------------------------


def topcuoglu() -> Instance:
    data = json.loads((CANONICAL / "topcuoglu2002.json").read_text())
    procs = data["processors"]
    tasks = [
        Task(name, tuple(Option("cpu", p, float(c), 1, 0) for p, c in zip(procs, row, strict=True)))
        for name, row in data["cost"].items()
    ]
    classes = tuple(MachineClass(p, 1, 1, GIB) for p in procs)
    return instance(tasks, [Edge(a, b, float(w)) for a, b, w in data["edges"]], classes, one_task_per_machine=True)


FAST = MachineClass("fast", 1, 4, 16 * GIB, speed=2.0)

BOUNDS = [
    # n1(9) -> n2(13) -> n9(12) -> n10(7) at each task's fastest processor; 91 / 3 for work
    pytest.param(topcuoglu(), 41.0, 91 / 3, id="topcuoglu"),
    # a chain 10 -> 20 on a 4-core machine: path 30; work 30 core-s / 4
    pytest.param(instance([cpu_task("a", 10), cpu_task("b", 20)], [Edge("a", "b", 1e9)]), 30.0, 30 / 8, id="chain"),
    # 8 independent 2-core 10 s tasks on two 4-core machines: work 160 / 8 = 20
    pytest.param(instance([cpu_task(f"t{i}", 10, cores=2) for i in range(8)]), 10.0, 20.0, id="work-bound"),
    # on a speed-2 machine a 10 s (speed-1) task runs 5 s, but its work is still 10 core-s
    pytest.param(
        instance([cpu_task(f"t{i}", 10, cores=4, classes=(FAST,)) for i in range(3)], classes=(FAST,)),
        5.0,
        3 * 40 / 8,
        id="speed",
    ),
    # the GPU variant is both the fastest (path) and the smallest work (2 cores x 1 s)
    pytest.param(instance([gpu_task("g", 100, 1)], classes=(CPU, GPU)), 1.0, 2 / 16, id="gpu-option"),
    # one task per machine: a task holds a whole machine, so cores count as 1
    pytest.param(
        instance([cpu_task(f"t{i}", 10, cores=4) for i in range(4)], one_task_per_machine=True),
        10.0,
        20.0,
        id="one-task",
    ),
]


@pytest.mark.parametrize(("inst", "path", "work"), BOUNDS)
def test_lower_bound_by_hand(inst: Instance, path: float, work: float) -> None:
    assert critical_path(inst) == pytest.approx(path)
    assert work_bound(inst) == pytest.approx(work)
    assert lower_bound(inst) == pytest.approx(max(path, work))


# --- the GPU term of the lower bound -------------------------------------------------------

A100 = MachineClass("a100", 1, 8, 32 * GIB, gpus=2, gpu_speed=1.0)
T4 = MachineClass("t4", 2, 8, 32 * GIB, gpus=1, gpu_speed=0.25)


def gpu_only(name: str, a100_s: float, t4_s: float | None = None, gpus: int = 1) -> Task:
    opts = [Option("gpu", "a100", a100_s, 2, GIB, gpus=gpus)]
    if t4_s is not None:
        opts.append(Option("gpu", "t4", t4_s, 2, GIB, gpus=gpus))
    return Task(name, tuple(opts))


GPU_BOUNDS = [
    # four 10 s one-GPU steps on two GPUs: 40 GPU-s / 2 GPUs
    pytest.param(instance([gpu_only(f"g{i}", 10) for i in range(4)], classes=(A100,)), 20.0, id="gpu-seconds"),
    # a step that also has a CPU variant could run on the CPUs: it counts nothing
    pytest.param(instance([gpu_task(f"g{i}", 100, 10) for i in range(4)], classes=(CPU, GPU)), 0.0, id="cpu-fallback"),
    # a T4 second weighs a quarter of an A100 second: min(2 x 10 x 1, 2 x 40 x 0.25) = 20
    # A100-seconds per step, over 2 x 1.0 + 2 x 0.25 = 2.5 weighted GPUs
    pytest.param(
        instance([gpu_only(f"g{i}", 10, 40, gpus=2) for i in range(1)] + [gpu_only("h", 10, 40)], classes=(A100, T4)),
        (20 + 10) / 2.5,
        id="weighted",
    ),
]


@pytest.mark.parametrize(("inst", "expected"), GPU_BOUNDS)
def test_gpu_bound_by_hand(inst: Instance, expected: float) -> None:
    assert gpu_bound(inst) == pytest.approx(expected)
    assert lower_bound(inst) >= gpu_bound(inst)


def test_the_gpu_term_is_what_makes_a_gpu_heavy_bound_honest() -> None:
    inst = instance([gpu_only(f"g{i}", 10) for i in range(8)], classes=(CPU, A100))

    assert critical_path(inst) == 10 and work_bound(inst) == pytest.approx(8 * 20 / 16)
    assert lower_bound(inst) == pytest.approx(40.0)  # 80 GPU-s on 2 GPUs
    assert greedy_first_fit(inst).makespan == pytest.approx(40.0)  # and a plan meets it


@st.composite
def gpu_heavy_instances(draw: st.DrawFn) -> Instance:
    """Steps with GPU-only variants on A100 and T4 classes, some with a CPU variant too."""
    classes = (MachineClass("c", 1, 4, 8 * GIB), A100, T4)
    tasks = []
    n = draw(st.integers(1, 7))
    for i in range(n):
        a = draw(seconds(10))
        opts = [Option("gpu", "a100", a, 1, GIB, gpus=draw(st.integers(1, 2))), Option("gpu", "t4", 4 * a, 1, GIB, 1)]
        if draw(st.booleans()):
            opts.append(Option("cpu", "c", draw(seconds(30)), draw(st.sampled_from([1, 2, 4])), GIB))
        tasks.append(Task(f"t{i}", tuple(opts)))
    edges = [
        Edge(f"t{j}", f"t{i}", draw(seconds(20))) for i in range(n) for j in range(i) if draw(st.integers(0, 3)) == 0
    ]
    return Instance(tuple(tasks), tuple(edges), classes, bandwidth=10.0, one_task_per_machine=draw(st.booleans()))


@settings(max_examples=150, deadline=None)
@given(gpu_heavy_instances())
def test_no_plan_beats_the_gpu_aware_lower_bound(inst: Instance) -> None:
    for plan in (greedy_first_fit(inst), kube_scheduler(inst, seed=1), slurm_backfill(inst), plan_heuristic(inst)):
        assert check_plan(inst, plan) == [], plan.algorithm
        assert plan.makespan >= lower_bound(inst) - 1e-9, plan.algorithm
