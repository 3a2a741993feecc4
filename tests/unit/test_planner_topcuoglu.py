"""The HEFT paper's example graph (bench/canonical/topcuoglu2002.json): published HEFT 80,
proven optimum 73."""

from __future__ import annotations

import pytest

from hetflow.plan.checking.validate import check_plan
from hetflow.plan.search.heuristic import heft, plan_heuristic
from tests.unit.test_planner_builders import topcuoglu


def test_heft_gives_the_published_makespan() -> None:
    plan = heft(topcuoglu())
    assert plan.makespan == 80
    assert check_plan(topcuoglu(), plan) == []


@pytest.mark.parametrize(
    ("task", "machine", "start", "finish"),
    [
        ("n1", "P3-0", 0, 9),
        ("n3", "P3-0", 9, 28),
        ("n4", "P2-0", 18, 26),
        ("n2", "P1-0", 27, 40),
        ("n10", "P2-0", 73, 80),
    ],
    ids=["n1", "n3", "n4", "n2", "n10"],
)
def test_heft_reproduces_the_published_schedule(task: str, machine: str, start: float, finish: float) -> None:
    """Topcuoglu et al. 2002, Fig. 3(a)."""
    p = heft(topcuoglu()).placements[task]
    assert (p.machine, p.start, p.finish) == (machine, start, finish)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heuristic_beats_heft(seed: int) -> None:
    plan = plan_heuristic(topcuoglu(), seed=seed)
    assert plan.makespan <= 76
    assert check_plan(topcuoglu(), plan) == []


def test_exact_proves_73() -> None:
    pytest.importorskip("ortools")
    from hetflow.plan.search.exact import plan_exact

    plan = plan_exact(topcuoglu(), time_limit=20)
    assert plan.makespan == 73
    assert plan.optimal
    assert check_plan(topcuoglu(), plan) == []
