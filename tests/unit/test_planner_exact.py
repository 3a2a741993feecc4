"""The exact planner (CP-SAT): optimal on small instances, never worse than the heuristic."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings

from hetflow.errors import HetflowError
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Instance, MachineClass, Option, Task
from hetflow.plan.search.heuristic import plan_heuristic
from tests.unit.test_planner_builders import instances, random_layered
from tests.unit.test_planner_heuristic import chain, dollars

GIB = 1024**3

pytest.importorskip("ortools")

from hetflow.plan.search.exact import plan_exact  # noqa: E402


@settings(max_examples=15, deadline=None)
@given(inst=instances(max_tasks=5))
def test_exact_is_valid_and_no_worse_than_the_heuristic(inst: Instance) -> None:
    exact = plan_exact(inst, time_limit=5, workers=1)
    assert check_plan(inst, exact) == []
    assert exact.makespan <= plan_heuristic(inst).makespan + 1e-9


def test_cost_objective_with_a_deadline_is_optimal() -> None:
    plan = plan_exact(chain(), objective="cost", deadline=325, workers=1)
    assert plan.optimal  # every cost is a whole number of micro-units of the largest
    assert plan.makespan <= 325
    assert plan.cost == pytest.approx(3 * dollars(100, 1) + dollars(25, 10))


def test_gpu_indices_are_given_after_solving() -> None:
    """Two GPUs: three 1-GPU tasks of 10 s and a 2-GPU task of 5 s need 25 s (the CPU node is
    too slow to help)."""
    one_gpu = (Option("gpu", "gpu", 10, 1, GIB, gpus=1), Option("cpu", "cpu", 40, 8, GIB))
    tasks = (*(Task(f"g{i}", one_gpu) for i in range(3)), Task("both", (Option("gpu", "gpu", 5, 1, GIB, gpus=2),)))
    classes = (
        MachineClass("gpu", count=1, cores=8, memory=32 * GIB, gpus=2),
        MachineClass("cpu", count=1, cores=8, memory=32 * GIB),
    )
    inst = Instance(tasks, (), classes)
    plan = plan_exact(inst, workers=1)
    assert check_plan(inst, plan) == []
    assert (plan.makespan, plan.optimal) == (25, True)
    assert plan.placements["both"].gpus == (0, 1)


def test_an_impossible_deadline_returns_the_heuristic_plan_with_a_note() -> None:
    plan = plan_exact(chain(), objective="cost", deadline=50, workers=1)
    assert plan.makespan == 100
    assert any("deadline not met" in n for n in plan.notes)


def test_big_instances_are_refused() -> None:
    with pytest.raises(HetflowError, match="use the heuristic planner"):
        plan_exact(random_layered(250, 16))


def test_missing_ortools_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ortools.sat.python.cp_model", None)
    with pytest.raises(HetflowError, match=r"pip install 'hetflow\[exact\]'"):
        plan_exact(chain())
