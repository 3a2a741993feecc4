"""The heuristic planner: valid, deterministic, never worse than HEFT, and it honours its
objective, its limits and its GPU policy."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.errors import HetflowError, NoFitError
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Plan, Rejection, Task
from hetflow.plan.search import heuristic
from hetflow.plan.search.compiled import Compiled
from hetflow.plan.search.heuristic import heft, plan_heuristic
from hetflow.plan.search.ranks import lower_bounds
from tests.unit.test_planner_builders import instances, random_layered

GIB = 1024**3
FAST = settings(max_examples=40, deadline=None)

# --- properties on random small instances ---------------------------------------------------


@FAST
@given(inst=instances(), seed=st.integers(0, 3), policy=st.sampled_from(["avoid", "allow"]))
def test_heuristic_plans_are_valid(inst: Instance, seed: int, policy: str) -> None:
    """No machine over capacity, no GPU twice, precedence with transfers, every placement one
    of the task's options (the filter-passing ones): all of ``check_plan``."""
    plan = plan_heuristic(inst, seed=seed, gpu_policy=policy)
    assert check_plan(inst, plan) == []


@FAST
@given(inst=instances(), objective=st.sampled_from(["makespan", "cost"]))
def test_heft_and_cost_plans_are_valid(inst: Instance, objective: str) -> None:
    assert check_plan(inst, heft(inst)) == []
    assert check_plan(inst, plan_heuristic(inst, objective=objective, deadline=30.0, budget=0.01)) == []


@FAST
@given(inst=instances(), seed=st.integers(0, 5))
def test_same_seed_same_plan(inst: Instance, seed: int) -> None:
    assert plan_heuristic(inst, seed=seed) == plan_heuristic(inst, seed=seed)


@FAST
@given(inst=instances(one_task_per_machine=True))
def test_never_worse_than_heft_one_task_per_machine(inst: Instance) -> None:
    assert plan_heuristic(inst, gpu_policy="allow").makespan <= heft(inst).makespan


@FAST
@given(inst=instances(one_task_per_machine=False))
def test_never_worse_than_heft_shared_machines(inst: Instance) -> None:
    assert plan_heuristic(inst, gpu_policy="allow").makespan <= heft(inst).makespan


def test_random_layered_plans_are_valid_and_deterministic() -> None:
    for one_task in (False, True):
        inst = random_layered(120, 16, seed=3, one_task_per_machine=one_task)
        plan = plan_heuristic(inst, seed=7)
        assert check_plan(inst, plan) == []
        assert plan.makespan <= heft(inst).makespan
        assert plan == plan_heuristic(inst, seed=7)


# --- gpu_policy -----------------------------------------------------------------------------

GPU_NODE = MachineClass("gpu", count=1, cores=8, memory=32 * GIB, gpus=1, price_per_hour=0.5)
CPU_NODE = MachineClass("cpu", count=1, cores=8, memory=32 * GIB, price_per_hour=1.0)


def cpu_task(name: str, on_gpu: float, on_cpu: float, cores: int = 4) -> Task:
    return Task(name, (Option("cpu", "gpu", on_gpu, cores, GIB), Option("cpu", "cpu", on_cpu, cores, GIB)))


def one(tasks: tuple[Task, ...], edges: tuple[Edge, ...] = ()) -> Instance:
    # The GPU class comes first, so that a tie goes to it unless the policy says otherwise.
    return Instance(tasks, edges, (GPU_NODE, CPU_NODE))


@pytest.mark.parametrize(
    ("tasks", "policy", "objective", "where"),
    [
        ((cpu_task("t", 10, 10),), "avoid", "makespan", "cpu"),
        ((cpu_task("t", 10, 10),), "allow", "makespan", "gpu"),
        ((cpu_task("t", 5, 10),), "avoid", "makespan", "gpu"),
        ((cpu_task("t", 10, 10),), "avoid", "cost", "cpu"),
        ((cpu_task("t", 10, 10),), "allow", "cost", "gpu"),
        ((cpu_task("t", 11, 10),), "avoid", "cost", "cpu"),
        ((cpu_task("t", 9, 10),), "avoid", "cost", "gpu"),
    ],
    ids=[
        "tie-avoid-stays-off-gpu",
        "tie-allow-takes-first",
        "gpu-node-faster-wins",
        "cost-avoid-stays-off-cheap-gpu",
        "cost-allow-takes-cheap-gpu",
        "cost-avoid-even-if-dearer",
        "cost-gpu-node-faster-is-allowed",
    ],
)
def test_gpu_policy(tasks: tuple[Task, ...], policy: str, objective: str, where: str) -> None:
    inst = one(tasks)
    plan = plan_heuristic(inst, gpu_policy=policy, objective=objective)
    assert plan.placements["t"].machine_class == where
    assert check_plan(inst, plan) == []


def test_gpu_policy_avoid_uses_the_gpu_node_when_the_cpu_node_is_busy() -> None:
    """ "big" fills the CPU node, so "t" finishes earlier on the GPU node: the plan gains."""
    big = Task("big", (Option("cpu", "cpu", 100, 8, GIB),))
    inst = one((big, cpu_task("t", 10, 10, cores=8)))
    plan = plan_heuristic(inst, gpu_policy="avoid")
    assert plan.placements["t"].machine_class == "gpu"
    assert plan.makespan == 100


def test_a_gpu_variant_gets_its_gpu() -> None:
    inst = one((Task("t", (Option("gpu", "gpu", 1, 1, GIB, gpus=1), Option("cpu", "cpu", 10, 4, GIB))),))
    p = plan_heuristic(inst).placements["t"]
    assert (p.variant, p.machine, p.gpus) == ("gpu", "gpu-0", (0,))


# --- objective, deadline, budget ------------------------------------------------------------

CHEAP = MachineClass("cheap", count=2, cores=4, memory=8 * GIB, price_per_hour=1.0)
DEAR = MachineClass("dear", count=2, cores=4, memory=8 * GIB, price_per_hour=10.0)


def chain(n: int = 4) -> Instance:
    """A chain of n tasks: 100 s on a cheap node, 25 s on a dear one (4x faster, 10x dearer)."""
    tasks = tuple(
        Task(f"t{i}", (Option("cpu", "cheap", 100, 4, GIB), Option("cpu", "dear", 25, 4, GIB))) for i in range(n)
    )
    edges = tuple(Edge(f"t{i}", f"t{i + 1}") for i in range(n - 1))
    return Instance(tasks, edges, (CHEAP, DEAR))


def dollars(seconds: float, price: float) -> float:
    return seconds / 3600 * price


def test_makespan_objective_takes_the_fast_nodes() -> None:
    plan = plan_heuristic(chain())
    assert plan.makespan == 100
    assert plan.notes == ()


def test_cost_objective_without_deadline_takes_the_cheapest_options() -> None:
    plan = plan_heuristic(chain(), objective="cost")
    assert plan.cost == pytest.approx(4 * dollars(100, 1.0))
    assert plan.makespan == 400


@pytest.mark.parametrize(
    ("deadline", "makespan", "cost"),
    [
        (400, 400, 4 * dollars(100, 1)),
        (325, 325, 3 * dollars(100, 1) + dollars(25, 10)),
        (250, 250, 2 * dollars(100, 1) + 2 * dollars(25, 10)),
        (100, 100, 4 * dollars(25, 10)),
    ],
    ids=["loose", "one-fast", "two-fast", "all-fast"],
)
def test_cost_objective_meets_the_deadline_as_cheaply_as_it_can(deadline: float, makespan: float, cost: float) -> None:
    plan = plan_heuristic(chain(), objective="cost", deadline=deadline)
    assert plan.makespan <= deadline
    assert plan.makespan == pytest.approx(makespan)
    assert plan.cost == pytest.approx(cost)
    assert plan.notes == ()


def test_impossible_deadline_gives_the_fastest_plan_and_a_note() -> None:
    plan = plan_heuristic(chain(), objective="cost", deadline=50)
    assert plan.makespan == 100
    assert len(plan.notes) == 1
    assert "deadline not met" in plan.notes[0]


@pytest.mark.parametrize(
    ("budget", "makespan"),
    [(1.0, 100), (2 * dollars(25, 10) + 2 * dollars(100, 1), 250), (4 * dollars(100, 1), 400)],
    ids=["ample", "half", "cheapest-only"],
)
def test_makespan_objective_keeps_within_the_budget(budget: float, makespan: float) -> None:
    plan = plan_heuristic(chain(), budget=budget)
    assert plan.cost <= budget * (1 + 1e-9)
    assert plan.makespan == pytest.approx(makespan)
    assert plan.notes == ()


def test_impossible_budget_gives_the_cheapest_plan_and_a_note() -> None:
    plan = plan_heuristic(chain(), budget=0.01)
    assert plan.cost == pytest.approx(4 * dollars(100, 1))
    assert "budget not met" in plan.notes[0]


# --- errors ---------------------------------------------------------------------------------


def test_a_task_without_options_says_why() -> None:
    task = Task("align", (), (Rejection("gpu", "cpu", "gpus", "asks for 1 GPU; cpu has none"),))
    with pytest.raises(NoFitError, match=r"'align' has no option.*asks for 1 GPU; cpu has none"):
        plan_heuristic(Instance((task,), (), (CPU_NODE,)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"objective": "speed"}, "objective 'speed'"), ({"gpu_policy": "never"}, "gpu_policy 'never'")],
    ids=["objective", "gpu-policy"],
)
def test_bad_arguments(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(HetflowError, match=message):
        plan_heuristic(chain(), **kwargs)  # type: ignore[arg-type]


def test_a_cycle_is_an_error() -> None:
    inst = chain(2)
    cyclic = Instance(inst.tasks, (*inst.edges, Edge("t1", "t0")), inst.classes)
    with pytest.raises(HetflowError, match="cycle"):
        plan_heuristic(cyclic)


def test_empty_instance() -> None:
    plan = plan_heuristic(Instance((), (), (CPU_NODE,)))
    assert (plan.placements, plan.makespan, plan.cost) == ({}, 0.0, 0.0)


# --- a first plan at its lower bounds ---------------------------------------------------------


def _full_search(inst: Instance, **kw: object) -> Plan:
    """``plan_heuristic`` with the lower-bound shortcut off (bounds no plan can meet)."""
    with mock.patch.object(heuristic, "lower_bounds", lambda _problem: (-1.0, -1.0)):
        return plan_heuristic(inst, **kw)  # type: ignore[arg-type]


@FAST
@given(inst=instances(), seed=st.integers(0, 3), objective=st.sampled_from(["makespan", "cost"]))
def test_lower_bounds_bound_and_the_shortcut_returns_the_full_searchs_plan(
    inst: Instance, seed: int, objective: str
) -> None:
    least_makespan, least_cost = lower_bounds(Compiled(inst))
    plan = plan_heuristic(inst, seed=seed, objective=objective)
    assert plan.makespan >= least_makespan - 1e-9 and plan.cost >= least_cost - 1e-9
    assert plan == _full_search(inst, seed=seed, objective=objective)


def test_a_chain_on_one_machine_skips_the_search() -> None:
    """Every pass places a chain the same way: the first plan is at both bounds, the same
    plan the search would return, found without it."""
    tasks = tuple(Task(f"s{i}", (Option("default", "cpu", 1.0 + i / 10, 1, GIB),)) for i in range(20))
    edges = tuple(Edge(f"s{i}", f"s{i + 1}", 0.0) for i in range(19))
    inst = Instance(tasks, edges, (CPU_NODE,))
    with mock.patch.object(heuristic.Search, "portfolio", side_effect=AssertionError("searched")):
        plan = plan_heuristic(inst)
    assert plan == _full_search(inst)
    assert plan.makespan == pytest.approx(sum(1.0 + i / 10 for i in range(20)))
