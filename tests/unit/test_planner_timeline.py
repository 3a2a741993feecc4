"""``MachineTimeline``: insertion into the earliest gap where cores, memory and GPU indices fit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from hetflow.plan.instance import Instance
from hetflow.plan.search.compiled import Compiled
from hetflow.plan.search.listpass import ListPass
from hetflow.plan.search.score import Rule
from hetflow.plan.search.timeline import MachineTimeline
from tests.unit.test_planner_builders import instances

GIB = 1024**3


def machine() -> MachineTimeline:
    """4 cores, 8 GiB, 2 GPUs; 2 cores and 4 GiB busy during [10, 20)."""
    tl = MachineTimeline(4, 8 * GIB, 2)
    tl.reserve(10, 20, 2, 4 * GIB, 0)
    return tl


@pytest.mark.parametrize(
    ("ready", "duration", "cores", "memory", "expected"),
    [
        (0, 5, 4, 0, 0),  # fits before
        (0, 15, 4, 0, 20),  # all cores: after
        (0, 15, 2, 4 * GIB, 0),  # the other half fits alongside
        (0, 15, 3, 0, 20),  # one core too many
        (5, 5, 1, 5 * GIB, 5),  # ends when the other starts
        (5, 6, 1, 5 * GIB, 20),  # one second into it: too much memory
        (25, 5, 4, 8 * GIB, 25),  # after everything
    ],
    ids=["before", "after", "alongside", "core-too-many", "back-to-back", "memory-too-much", "late"],
)
def test_earliest_start(ready: float, duration: float, cores: float, memory: int, expected: float) -> None:
    assert machine().earliest_start(ready, duration, cores, memory, 0) == expected


def test_limit_gives_up() -> None:
    assert machine().earliest_start(0, 15, 4, 0, 0, limit=30) == float("inf")


def test_gpu_indices_not_just_counts() -> None:
    """GPU 0 busy [0, 2), GPU 1 busy [2, 5): one GPU is free at every instant, but no single
    GPU is free for all of [0, 4)."""
    tl = MachineTimeline(8, 8 * GIB, 2)
    first = tl.reserve(0, 3, 1, GIB, 1)
    assert first == (0,)
    assert tl.reserve(2, 5, 1, GIB, 1) == (1,)
    tl.release(0, 3, 1, GIB, first)
    assert tl.reserve(0, 2, 1, GIB, 1) == (0,)
    assert tl.earliest_start(0, 4, 1, GIB, 1) == 2
    assert tl.reserve(2, 6, 1, GIB, 1) == (0,)
    assert tl.earliest_start(0, 1, 1, GIB, 2) == 6


def test_one_task_per_machine_is_capacity_one() -> None:
    tl = MachineTimeline(1, 0, 0)
    tl.reserve(0, 10, 1, 0, 0)
    tl.reserve(15, 20, 1, 0, 0)
    assert tl.earliest_start(0, 5, 1, 0, 0) == 10
    assert tl.earliest_start(0, 6, 1, 0, 0) == 20


def test_every_rule_kind_the_planner_uses_has_its_score_plugin() -> None:
    """plan.score: a Rule.kind the heuristic uses must name a registered score, not fall
    back to the cheapest one by accident."""
    import re
    from pathlib import Path

    from hetflow.plan.search.score import SCORES

    src = (Path(__file__).resolve().parents[2] / "src" / "hetflow" / "plan" / "search" / "heuristic.py").read_text()
    kinds = set(re.findall(r'Rule\(\s*"(\w+)"', src)) | set(re.findall(r'kind="(\w+)"', src))
    assert kinds, "no Rule kinds found in heuristic.py"
    assert kinds <= set(SCORES), kinds - set(SCORES)


@settings(max_examples=40, deadline=None)
@given(instances())
def test_the_default_score_picks_what_ranking_every_candidate_would(inst: Instance) -> None:
    """plan.score: earliest finish searches the machines with pruning instead of listing
    every candidate; it must pick what ranking them all by (finish, flag, machine, option)
    picks."""
    from hetflow.plan.search.score import SCORES

    cp = Compiled(inst)
    lp = ListPass(cp, Rule("eft", avoid=False), [0.0] * cp.n)
    for t in range(cp.n):
        if all(lp.done[p] for p, _ in cp.parents[t]):
            every = min(lp.per_choice(t), key=lambda c: c[:4])
            assert SCORES["eft"].pick(lp, t)[:4] == every[:4]
