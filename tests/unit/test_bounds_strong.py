"""The strong lower bound (``lower_bound(strong=True)``: the LP of ``plan.lpbound`` and
option pruning, ``plan.bounds``): never above any plan, the exact planner's optimum
included, and tighter where a GPU step's CPU variant is too slow to leave the GPU pool."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hetflow.errors import NoFitError
from hetflow.plan.baselines.backfill import slurm_backfill
from hetflow.plan.baselines.firstfit import greedy_first_fit
from hetflow.plan.baselines.kubesched import kube_scheduler
from hetflow.plan.bounds import lpbound
from hetflow.plan.bounds.lower import lower_bound
from hetflow.plan.bounds.lpbound import lp_bound
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Plan, Task
from hetflow.plan.search.heuristic import heft, plan_heuristic
from tests.unit.builders import GIB
from tests.unit.test_baseline import gpu_heavy_instances
from tests.unit.test_planner_builders import instances

CPUS = MachineClass("cpu", 4, 4, 16 * GIB)
ONE_GPU = MachineClass("gpu", 1, 8, 32 * GIB, gpus=1)


def slow_cpu_steps(n: int, gpu_s: float = 10.0, cpu_s: float = 100.0) -> Instance:
    """``n`` independent steps: ``gpu_s`` on the one GPU or ``cpu_s`` on a CPU node."""
    tasks = tuple(
        Task(f"t{i}", (Option("cpu", "cpu", cpu_s, 1, GIB), Option("gpu", "gpu", gpu_s, 1, GIB, gpus=1)))
        for i in range(n)
    )
    return Instance(tasks, (), (CPUS, ONE_GPU))


def plans(inst: Instance) -> list[Plan]:
    return [
        plan_heuristic(inst),
        heft(inst),
        greedy_first_fit(inst),
        kube_scheduler(inst, seed=1),
        slurm_backfill(inst),
    ]


@settings(max_examples=120, deadline=None)
@given(inst=instances())
def test_no_plan_beats_the_strong_bound(inst: Instance) -> None:
    strong = lower_bound(inst, strong=True)
    assert strong >= lower_bound(inst) - 1e-9
    for plan in plans(inst):
        assert check_plan(inst, plan) == [], plan.algorithm
        assert plan.makespan >= strong - 1e-9, plan.algorithm


@settings(max_examples=80, deadline=None)
@given(inst=gpu_heavy_instances())
def test_no_plan_beats_the_strong_bound_on_gpu_heavy_instances(inst: Instance) -> None:
    strong = lower_bound(inst, strong=True)
    for plan in plans(inst):
        assert plan.makespan >= strong - 1e-9, plan.algorithm


@settings(max_examples=25, deadline=None)
@given(inst=instances(max_tasks=5))
def test_the_exact_optimum_is_never_below_the_strong_bound(inst: Instance) -> None:
    pytest.importorskip("ortools")
    from hetflow.plan.search.exact import plan_exact

    plan = plan_exact(inst, time_limit=5, workers=1)
    assert plan.makespan >= lower_bound(inst, strong=True) - 1e-9
    if plan.optimal:  # the bound may meet the optimum, never pass it
        assert lower_bound(inst, strong=True) <= plan.makespan * (1 + 1e-9)


def test_a_gpu_step_whose_cpu_variant_is_too_slow_stays_in_the_gpu_pool() -> None:
    # 3 steps, 10 s on the one GPU or 100 s on a CPU: the optimum runs them one after the
    # other on the GPU (30 s).  The closed-form bound sees 10 s (critical path), the plain
    # LP 25 s (each step 5/6 on the GPU, 1/6 on a CPU), pruning sees that no step can take
    # its 100-s CPU variant in a plan under 100 s.
    inst = slow_cpu_steps(3)
    assert lower_bound(inst) == pytest.approx(10.0)
    if lpbound.lp_solution(inst) is not None:
        assert lp_bound(inst) == pytest.approx(25.0, rel=1e-6)
    strong = lower_bound(inst, strong=True)
    assert 29.8 <= strong <= 30.0
    assert plan_heuristic(inst).makespan == pytest.approx(30.0)


def test_chains_and_capacity_in_one_lp() -> None:
    # a -> b, each 10 s on the GPU or 40 s on a CPU, beside two free-standing GPU steps:
    # the chain alone says 20, the GPU area alone 0 (every step has a CPU variant).
    tasks = tuple(
        Task(n, (Option("cpu", "cpu", 40.0, 1, GIB), Option("gpu", "gpu", 10.0, 1, GIB, gpus=1)))
        for n in ("a", "b", "c", "d")
    )
    inst = Instance(tasks, (Edge("a", "b"),), (CPUS, ONE_GPU))
    strong = lower_bound(inst, strong=True)
    assert strong > lower_bound(inst) + 1.0
    assert plan_heuristic(inst).makespan >= strong - 1e-9


def test_without_ortools_the_strong_bound_keeps_its_closed_form_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lpbound, "_linear_solver", lambda: None)
    inst = slow_cpu_steps(3)
    assert lp_bound(inst) is None
    assert 29.8 <= lower_bound(inst, strong=True) <= 30.0  # pruning works on the GPU term too


def test_gpu_steps_run_in_whole_rounds() -> None:
    # 3 equal steps on 2 GPUs (their CPU variant is too slow to help): the area says 15 s,
    # a GPU runs the third step after one of the first two, so 20 s.
    two_gpus = MachineClass("gpu", 1, 8, 32 * GIB, gpus=2)
    tasks = tuple(
        Task(f"t{i}", (Option("cpu", "cpu", 100.0, 1, GIB), Option("gpu", "gpu", 10.0, 1, GIB, gpus=1)))
        for i in range(3)
    )
    inst = Instance(tasks, (), (CPUS, two_gpus))
    assert 19.9 <= lower_bound(inst, strong=True) <= 20.0
    assert plan_heuristic(inst).makespan == pytest.approx(20.0)


def test_the_second_round_is_the_steps_with_the_shortest_tails() -> None:
    # 3 equal GPU steps on 2 GPUs, each followed by its own CPU step of 5, 20 or 40 s: one
    # of them waits for a second round, at best the one with the 5-s tail (10 + 10 + 5 = 25),
    # while the 40-s tail needs 10 + 40 = 50 anyway.  With tails 30, 40, 40 the second round
    # costs: 10 + 10 + 30 = 50 (the plain area-with-tails bound says 10 + 40 = 50 too), and
    # with 35, 40, 40 it is 55.
    two_gpus = MachineClass("gpu", 1, 8, 32 * GIB, gpus=2)

    def inst(tails: tuple[float, ...]) -> Instance:
        tasks: list[Task] = []
        edges: list[Edge] = []
        for i, q in enumerate(tails):
            tasks.append(
                Task(f"g{i}", (Option("cpu", "cpu", 500.0, 1, GIB), Option("gpu", "gpu", 10.0, 1, GIB, gpus=1)))
            )
            tasks.append(Task(f"c{i}", (Option("cpu", "cpu", q, 1, GIB),)))
            edges.append(Edge(f"g{i}", f"c{i}"))
        return Instance(tuple(tasks), tuple(edges), (CPUS, two_gpus))

    for tails, optimum in (((5.0, 20.0, 40.0), 50.0), ((35.0, 40.0, 40.0), 55.0)):
        case = inst(tails)
        assert optimum * (1 - 1e-4) <= lower_bound(case, strong=True) <= optimum
        assert plan_heuristic(case).makespan == pytest.approx(optimum)


@settings(max_examples=60, deadline=None)
@given(inst=gpu_heavy_instances(), replicas=st.integers(2, 3), comm=st.sampled_from([0.0, 1e9]))
def test_no_plan_beats_the_strong_bound_with_a_gang(inst: Instance, replicas: int, comm: float) -> None:
    gang = replace(inst.tasks[0], replicas=replicas, comm_bytes=comm)
    inst = replace(inst, tasks=(gang, *inst.tasks[1:]))
    try:
        plan = plan_heuristic(inst)
    except NoFitError:
        assume(False)
        return
    assert check_plan(inst, plan) == []
    assert plan.makespan >= lower_bound(inst, strong=True) - 1e-9
