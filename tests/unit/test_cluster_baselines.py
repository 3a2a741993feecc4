"""The kube-scheduler-style and Slurm-EASY-backfill-style baselines, case by case."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings

from hetflow.plan.baselines.backfill import slurm_backfill
from hetflow.plan.baselines.firstfit import greedy_first_fit
from hetflow.plan.baselines.kubesched import balanced_allocation, kube_scheduler, least_allocated
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Plan, Task
from hetflow.plan.model.machine import Machine
from tests.unit.builders import GIB
from tests.unit.test_baseline import small_instances

BIG = MachineClass("n", 2, 8, 32 * GIB)
ONE = MachineClass("n", 1, 4, 16 * GIB)
GPU = MachineClass("g", 1, 8, 32 * GIB, gpus=1)


def step(name: str, runtime: float, cores: float, memory: int = GIB, classes: Sequence[MachineClass] = (BIG,)) -> Task:
    return Task(name, tuple(Option("cpu", c.name, runtime, cores, memory) for c in classes))


def inst(tasks: Sequence[Task], classes: tuple[MachineClass, ...] = (BIG,), edges: Sequence[Edge] = ()) -> Instance:
    return Instance(tuple(tasks), tuple(edges), classes, bandwidth=10.0)


def at(plan: Plan, name: str) -> tuple[str, float, float]:
    p = plan.placements[name]
    return p.machine, p.start, p.finish


def node(cores: float, memory: int, used_cores: float, used_memory: int) -> Machine:
    return Machine(0, "n-0", BIG, cores, memory, cores - used_cores, memory - used_memory)


# --- kube-scheduler: the scores --------------------------------------------------------------

SCORES = [
    # (used cores, used GiB) on an 8-core 32 GiB node, a 1-core 4 GiB pod -> (LeastAllocated, Balanced)
    # cpu (8-5)*100//8 = 37, memory (32-4)*100//32 = 87 -> 62; fractions .625, .125 -> std .25 -> 75
    pytest.param(4, 0, 62, 75, id="cpu-heavy"),
    # cpu 3/8 and memory 12/32 requested: 62 and 62 -> 62; equal fractions -> 100
    pytest.param(2, 8, 62, 100, id="balanced"),
    # an idle node: cpu 87, memory 87 -> 87; .125 and .125 -> 100
    pytest.param(0, 0, 87, 100, id="idle"),
]


@pytest.mark.parametrize(("used_cores", "used_gib", "least", "balanced"), SCORES)
def test_kube_scores_by_hand(used_cores: float, used_gib: int, least: int, balanced: int) -> None:
    n = node(8, 32 * GIB, used_cores, used_gib * GIB)
    assert least_allocated(n, 1, 4 * GIB) == least
    assert balanced_allocation(n, 1, 4 * GIB) == balanced


def test_least_allocated_picks_the_emptier_node() -> None:
    for seed in range(10):  # the first pod's node is a coin toss; the second never joins it
        plan = kube_scheduler(inst([step("long", 100, 6), step("small", 10, 1)]), seed=seed)
        assert at(plan, "small")[0] != at(plan, "long")[0]


def test_balanced_allocation_breaks_a_least_allocated_tie() -> None:
    # x (4 cores, no memory) and y (2 cores, 8 GiB) land on different nodes; for z both nodes
    # score 62 on LeastAllocated, and only BalancedAllocation (75 vs 100) sends it to y's.
    tasks = [step("x", 100, 4, 0), step("y", 100, 2, 8 * GIB), step("z", 10, 1, 4 * GIB)]
    for seed in range(20):
        plan = kube_scheduler(inst(tasks), seed=seed)
        assert at(plan, "z")[0] == at(plan, "y")[0] != at(plan, "x")[0]


def test_ties_go_at_random_from_the_seed() -> None:
    tasks = [step(f"t{i}", 10, 1) for i in range(1)]
    chosen = {at(kube_scheduler(inst(tasks), seed=s), "t0")[0] for s in range(20)}
    assert chosen == {"n-0", "n-1"}
    assert kube_scheduler(inst(tasks), seed=3) == kube_scheduler(inst(tasks), seed=3)


def test_a_pod_that_fits_nowhere_waits_and_the_next_one_still_runs() -> None:
    tasks = [step("a", 10, 2, classes=(ONE,)), step("big", 5, 4, classes=(ONE,)), step("small", 3, 1, classes=(ONE,))]
    plan = kube_scheduler(inst(tasks, (ONE,)))

    assert at(plan, "small")[1:] == (0, 3)  # no head-of-line blocking
    assert at(plan, "big")[1:] == (10, 15)  # retried when a pod finishes, fits once a has


def test_gpus_are_filtered_on_as_an_extended_resource() -> None:
    gpu_step = Task("g", (Option("gpu", "g", 5, 2, GIB, gpus=1), Option("cpu", "n", 50, 1, GIB)))
    plan = kube_scheduler(inst([gpu_step, Task("h", gpu_step.options)], (BIG, GPU)))

    assert plan.placements["g"].variant == "gpu" and plan.placements["g"].gpus == (0,)
    assert plan.placements["h"].variant == "cpu"  # the one GPU is taken: the next variant


def test_a_child_is_created_when_its_parent_finishes() -> None:
    plan = kube_scheduler(inst([step("p", 10, 8), step("c", 1, 8)], edges=[Edge("p", "c", 50.0)]))
    machine, start, _ = at(plan, "c")
    assert start == (10 if machine == at(plan, "p")[0] else 15)  # 50 B at 10 B/s from another node


# --- Slurm-style: priority, EASY backfill ----------------------------------------------------


def one_node(*tasks: Task) -> Instance:
    return inst(tasks, (ONE,))


def test_a_short_job_backfills_ahead_of_a_blocked_big_one() -> None:
    plan = slurm_backfill(
        one_node(
            step("a", 10, 2, classes=(ONE,)), step("big", 5, 4, classes=(ONE,)), step("short", 10, 2, classes=(ONE,))
        )
    )

    assert at(plan, "short")[1:] == (0, 10)  # ends by the reservation: starts now
    assert at(plan, "big")[1:] == (10, 15)  # and the reservation holds


def test_easy_backfill_does_not_let_a_long_job_delay_the_reservation() -> None:
    tasks = (step("a", 10, 2, classes=(ONE,)), step("big", 5, 4, classes=(ONE,)), step("long", 20, 2, classes=(ONE,)))
    plan = slurm_backfill(one_node(*tasks))

    assert at(plan, "big")[1:] == (10, 15)
    assert at(plan, "long")[1:] == (15, 35)  # it fitted at 0, but would have held big to 20
    assert at(greedy_first_fit(one_node(*tasks)), "big")[1:] == (20, 25)  # first fit lets it


def test_a_long_job_may_backfill_into_what_the_reservation_leaves_spare() -> None:
    tasks = (step("a", 10, 3, classes=(ONE,)), step("big", 5, 2, classes=(ONE,)), step("long", 100, 1, classes=(ONE,)))
    plan = slurm_backfill(one_node(*tasks))

    assert at(plan, "long")[1:] == (0, 100)  # at 10, 4 - 2 cores stay free beside big
    assert at(plan, "big")[1:] == (10, 15)


def test_jobs_go_by_age_then_job_id() -> None:
    # c becomes eligible at 5 (after p), after b (eligible at 0), so b goes first at 10
    tasks = [
        step("p", 5, 1, classes=(ONE,)),
        step("a", 10, 3, classes=(ONE,)),
        step("c", 4, 4, classes=(ONE,)),
        step("b", 10, 4, classes=(ONE,)),
    ]
    plan = slurm_backfill(inst(tasks, (ONE,), [Edge("p", "c", 0.0)]))

    assert at(plan, "b")[1:] == (10, 20)
    assert at(plan, "c")[1:] == (20, 24)


@settings(max_examples=200, deadline=None)
@given(small_instances())
def test_the_baselines_plans_are_valid_and_deterministic(instance: Instance) -> None:
    for make in (lambda: kube_scheduler(instance, seed=7), lambda: slurm_backfill(instance)):
        plan = make()
        assert check_plan(instance, plan) == []
        assert make() == plan
