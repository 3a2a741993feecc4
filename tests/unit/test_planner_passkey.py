"""A portfolio pass that would repeat an earlier one is not built again (``listpass.pass_key``):
passes of equal keys build the same schedule, and the planner's plans are the plans it makes
when every pass is built."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.plan.instance import Instance
from hetflow.plan.search import heuristic
from hetflow.plan.search.compiled import Compiled
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.search.listpass import ListPass, pass_key
from hetflow.plan.search.ranks import mean_runtime, rounded, upward_rank
from hetflow.plan.search.score import Rule
from tests.unit.test_planner_builders import instances

FAST = settings(max_examples=40, deadline=None)


@FAST
@given(inst=instances(), scale=st.floats(0.5, 4.0), shift=st.floats(-100.0, 100.0))
def test_priorities_in_the_same_order_give_the_same_key_and_the_same_schedule(
    inst: Instance, scale: float, shift: float
) -> None:
    problem = Compiled(inst)
    rank = rounded(upward_rank(problem, mean_runtime(problem)))
    moved = [r * scale + shift for r in rank]  # strictly increasing: the same order and ties
    if any(moved[a] < moved[b] and not rank[a] < rank[b] for a in range(problem.n) for b in range(problem.n)):
        return  # the floats' rounding merged or swapped two priorities: not the same order
    if any((moved[a] == moved[b]) != (rank[a] == rank[b]) for a in range(problem.n) for b in range(problem.n)):
        return
    rule = Rule("eft", True)
    assert pass_key(rule, rank, None) == pass_key(rule, moved, None)
    assert ListPass(problem, rule, rank).run() == ListPass(problem, rule, moved).run()


def test_another_order_another_rule_or_other_ties_give_another_key() -> None:
    rule = Rule("eft", True)
    base = pass_key(rule, [3.0, 2.0, 1.0], None)
    assert pass_key(rule, [3.0, 1.0, 2.0], None) != base
    assert pass_key(Rule("eft", False), [3.0, 2.0, 1.0], None) != base
    assert pass_key(rule, [3.0, 2.0, 1.0], [2, 1, 0]) == base  # the tie-break decides only ties
    assert pass_key(rule, [2.0, 2.0, 1.0], None) != pass_key(rule, [2.5, 2.0, 1.0], None)  # a tie, or not


@FAST
@given(inst=instances(), seed=st.integers(0, 3), objective=st.sampled_from(["makespan", "cost"]))
def test_the_plans_are_those_made_with_every_pass_built(inst: Instance, seed: int, objective: str) -> None:
    kept = plan_heuristic(inst, seed=seed, objective=objective)
    with mock.patch.object(heuristic, "pass_key", side_effect=lambda *args: object()):  # every key new
        built = plan_heuristic(inst, seed=seed, objective=objective)
    assert kept == built
