"""How long the heuristic takes on big random DAGs: printed, not asserted (the timed figures
come from the benchmark).  Targets on a 2-core laptop: 2,000 tasks on 64 machines in 2 s,
10,000 tasks on 256 machines in 20 s.  Run with ``-s`` to see the figures."""

from __future__ import annotations

import time

import pytest

from hetflow.plan.checking.validate import check_plan
from hetflow.plan.search.heuristic import plan_heuristic
from tests.unit.test_planner_builders import random_layered


@pytest.mark.parametrize("one_task", [False, True], ids=["shared", "one-task-per-machine"])
@pytest.mark.parametrize(("tasks", "machines"), [(2000, 64), (10_000, 256)], ids=["2000x64", "10000x256"])
def test_planning_time(tasks: int, machines: int, one_task: bool) -> None:
    inst = random_layered(tasks, machines, seed=1, one_task_per_machine=one_task)
    wall, cpu = time.perf_counter(), time.process_time()
    plan = plan_heuristic(inst)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"\nplan_heuristic: {tasks} tasks on {machines} machines "
        f"({'one task per machine' if one_task else 'shared machines'}): "
        f"{wall:.2f} s wall, {cpu:.2f} s CPU, makespan {plan.makespan:.0f} s"
    )
    assert len(plan.placements) == tasks
    assert check_plan(inst, plan) == []
