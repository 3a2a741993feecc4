"""``check_plan`` finds each kind of violation; ``plan_cost`` follows its model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from hetflow.errors import HetflowError
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Placement, Plan, Task
from hetflow.plan.search.heuristic import heft

GIB = 1024**3

CPU = MachineClass("cpu", count=2, cores=4, memory=8 * GIB, price_per_hour=1.0)
GPU = MachineClass("gpu", count=1, cores=8, memory=16 * GIB, gpus=2, price_per_hour=4.0)


def instance(one_task_per_machine: bool = False) -> Instance:
    tasks = (
        Task("a", (Option("cpu", "cpu", 10, 2, 2 * GIB),)),
        Task("b", (Option("gpu", "gpu", 5, 1, GIB, gpus=1),)),
        Task("c", (Option("cpu", "cpu", 4, 2, 2 * GIB), Option("gpu", "gpu", 2, 1, GIB, gpus=2))),
        Task("d", (Option("big", "cpu", 10, 1, 7 * GIB), Option("wide", "cpu", 10, 3, GIB))),
        Task("e", (Option("gpu", "gpu", 5, 1, GIB, gpus=1),)),
    )
    edges = (Edge("a", "b", 100), Edge("a", "c", 0))
    return Instance(tasks, edges, (CPU, GPU), bandwidth=10.0, one_task_per_machine=one_task_per_machine)


def at(task: str, variant: str, machine: str, start: float, finish: float, gpus: tuple[int, ...] = ()) -> Placement:
    option = next(o for o in instance().task(task).options if o.variant == variant)
    cls = machine.rsplit("-", 1)[0]
    return Placement(task, variant, machine, cls, start, finish, option.cores, option.memory, gpus)


def plan_of(inst: Instance, placements: list[Placement]) -> Plan:
    by_task = {p.task: p for p in placements}
    makespan = max(p.finish for p in placements)
    try:
        cost = plan_cost(inst, by_task)
    except HetflowError:
        cost = 0.0  # a placement on an unknown class: check_plan reports it
    return Plan(by_task, makespan, cost, "test")


def valid() -> list[Placement]:
    return [
        at("a", "cpu", "cpu-0", 0, 10),
        at("b", "gpu", "gpu-0", 20, 25, (0,)),  # a -> b crosses machines: 100 bytes at 10 B/s
        at("c", "cpu", "cpu-0", 10, 14),
        at("d", "big", "cpu-1", 0, 10),
        at("e", "gpu", "gpu-0", 20, 25, (1,)),
    ]


def test_the_valid_plan_is_valid() -> None:
    assert check_plan(instance(), plan_of(instance(), valid())) == []


def changed(**new: Placement) -> Callable[[], list[Placement]]:
    def build() -> list[Placement]:
        return [new.get(p.task, p) for p in valid()] + [p for name, p in new.items() if name not in "abcde"]

    return build


def without(task: str) -> Callable[[], list[Placement]]:
    return lambda: [p for p in valid() if p.task != task]


a0 = valid()[0]

CASES: list[tuple[str, Callable[[], list[Placement]], str]] = [
    ("missing-task", without("c"), "task 'c' is not placed"),
    ("unknown-task", changed(zz=replace(a0, task="zz")), "placement for unknown task 'zz'"),
    ("not-an-option", changed(a=replace(a0, variant="gpu")), "variant 'gpu' on class 'cpu' is not one of its options"),
    ("wrong-runtime", changed(a=replace(a0, finish=11)), "its option 'cpu' on 'cpu' takes 10 s"),
    ("wrong-cores", changed(a=replace(a0, cores=3)), "holds 3 cores"),
    ("unknown-class", changed(a=replace(a0, machine_class="tpu", machine="tpu-0")), "which the cluster does not have"),
    ("no-such-machine", changed(a=replace(a0, machine="cpu-7")), "'cpu-7', which is not a machine of class 'cpu'"),
    ("before-time-0", changed(a=replace(a0, start=-1, finish=9)), "starts at -1, before time 0"),
    (
        "parent-same-machine",
        changed(c=at("c", "cpu", "cpu-0", 5, 9)),
        "'c' starts at 5, before its parent 'a' finishes at 10 (on the same machine)",
    ),
    (
        "parent-transfer",
        changed(b=at("b", "gpu", "gpu-0", 15, 20, (0,))),
        "'b' starts at 15, before its parent 'a' finishes at 10 (plus 10 s to move 100 bytes)",
    ),
    ("over-cores", changed(d=at("d", "wide", "cpu-0", 0, 10)), "over capacity at t=0: 5 of 4 cores"),
    ("over-memory", changed(d=at("d", "big", "cpu-0", 0, 10)), f"{9 * GIB} of {8 * GIB} bytes of memory"),
    ("over-gpus", changed(c=at("c", "gpu", "gpu-0", 21, 23, (0, 1))), "4 of 2 GPUs"),
    ("gpu-given-twice", changed(e=at("e", "gpu", "gpu-0", 20, 25, (0,))), "GPU 0 of machine 'gpu-0' is given to"),
    ("gpu-out-of-range", changed(e=at("e", "gpu", "gpu-0", 20, 25, (2,))), "uses GPU index(es) [2] on 'gpu-0'"),
    ("gpu-count", changed(e=at("e", "gpu", "gpu-0", 30, 35, ())), "was given 0 GPU(s) []; its option asks for 1"),
    ("gpu-listed-twice", changed(c=at("c", "gpu", "gpu-0", 30, 32, (1, 1))), "lists a GPU index twice"),
]


@pytest.mark.parametrize(("build", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_plan_finds(build: Callable[[], list[Placement]], expected: str) -> None:
    problems = check_plan(instance(), plan_of(instance(), build()))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [("makespan", 99.0, "the plan's makespan is 99; its last task finishes at 25"), ("cost", 123.0, "cost is 123")],
    ids=["makespan", "cost"],
)
def test_check_plan_finds_wrong_totals(field: str, value: float, expected: str) -> None:
    plan = plan_of(instance(), valid())
    plan = replace(plan, makespan=value) if field == "makespan" else replace(plan, cost=value)
    assert any(expected in p for p in check_plan(instance(), plan))


def test_one_task_per_machine_forbids_sharing() -> None:
    inst = instance(one_task_per_machine=True)
    plan = heft(inst)
    assert check_plan(inst, plan) == []
    a = plan.placements["a"]
    d = replace(plan.placements["d"], machine=a.machine, start=a.start, finish=a.start + 10)
    bad = plan_of(inst, [*(p for p in plan.placements.values() if p.task != "d"), d])
    assert any("runs one task at a time" in p for p in check_plan(inst, bad))


def test_a_task_may_start_when_another_finishes() -> None:
    """Half-open intervals: back to back on a full machine is fine."""
    placements = [*valid()[:3], at("d", "wide", "cpu-0", 10, 20), valid()[4]]
    placements[2] = at("c", "cpu", "cpu-1", 10, 14)
    assert check_plan(instance(), plan_of(instance(), placements)) == []


# --- plan_cost ------------------------------------------------------------------------------

HOUR = 3600.0
PRICED = (
    MachineClass("cpu", count=1, cores=4, memory=8 * GIB, price_per_hour=2.0),
    MachineClass("gpu", count=1, cores=8, memory=16 * GIB, gpus=2, price_per_hour=4.0),
    MachineClass("free", count=1, cores=4, memory=8 * GIB, price_per_hour=0.0),
)


def placed(cls: str, seconds: float, cores: float, memory: int, gpus: tuple[int, ...] = ()) -> Placement:
    return Placement("t", "v", f"{cls}-0", cls, 0.0, seconds, cores, memory, gpus)


@pytest.mark.parametrize(
    ("placements", "one_task", "dollars"),
    [
        ([placed("cpu", HOUR, 2, 2 * GIB)], False, 1.0),
        ([placed("cpu", HOUR, 1, 6 * GIB)], False, 1.5),
        ([placed("gpu", HOUR / 2, 1, GIB, (0, 1))], False, 2.0),
        ([placed("gpu", HOUR, 1, GIB, (1,))], False, 2.0),
        ([placed("cpu", HOUR, 1, GIB)], True, 2.0),
        ([placed("free", HOUR, 4, 8 * GIB)], False, 0.0),
        ([placed("cpu", HOUR, 2, 2 * GIB), placed("gpu", HOUR, 8, GIB)], False, 5.0),
    ],
    ids=["cores-dominate", "memory-dominates", "gpus-dominate", "one-of-two-gpus", "whole-machine", "free", "sum"],
)
def test_plan_cost(placements: list[Placement], one_task: bool, dollars: float) -> None:
    inst = Instance((), (), PRICED, one_task_per_machine=one_task)
    assert plan_cost(inst, placements) == pytest.approx(dollars)


def test_a_task_with_next_to_no_run_time_is_checked_not_crashed_on() -> None:
    """Found by a hypothesis run: a 1e-241 s task's finish sorted before its start."""
    tiny = Task("t", (Option("cpu", "cpu", 1e-241, 2, 2 * GIB),))
    inst = Instance((Task("a", (Option("cpu", "cpu", 10, 2, 2 * GIB),)), tiny), (), (CPU,), bandwidth=10.0)
    placements = {
        "a": Placement("a", "cpu", "cpu-0", "cpu", 0, 10, 2, 2 * GIB),
        "t": Placement("t", "cpu", "cpu-0", "cpu", 0, 1e-241, 2, 2 * GIB),
    }
    assert check_plan(inst, Plan(placements, 10, plan_cost(inst, placements), "test")) == []
