"""The anchors of a virtual cluster's saving: the cheapest single type and the cheapest
two-type mix meeting a deadline, on hand-made catalogs whose answers are worked out below."""

from __future__ import annotations

import json

import pytest

from hetflow.plan.instance import Instance
from hetflow.plan.sizing.anchors import Anchors, search_anchors
from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.plan.sizing.virtual import common_denominator, restrict, search_virtual_cluster
from tests.unit.test_simulate_support import instance, list_schedule, mclass, opt, task


def bag(n: int) -> Instance:
    """``n`` independent one-core steps: 100 s on ``slow`` ($0.10/h), 25 s on ``fast``
    ($1/h), 50 s on ``big`` ($5/h, the most memory: the common-denominator rule's type).
    Each node has one core, so a node runs one step at a time."""
    classes = [
        mclass("slow", 20, cores=1, memory_gib=16, price=0.10),
        mclass("fast", 20, cores=1, memory_gib=16, price=1.0),
        mclass("big", 20, cores=1, memory_gib=256, price=5.0),
    ]
    tasks = [task(f"t{i}", opt("cpu", "slow", 100), opt("cpu", "fast", 25), opt("cpu", "big", 50)) for i in range(n)]
    return instance(tasks, [], classes)


def cpu_and_gpu() -> Instance:
    """A GPU-only step (100 s) and six CPU steps (100 s each) that also run on GPU nodes.
    ``cpu`` cannot run the GPU step; ``gpu`` ($2/h) and ``gpu.big`` ($6/h, the most
    memory) can run everything.  Within 200 s: one type alone needs 4 x gpu ($0.44);
    the cheapest mix is 1 x gpu + 3 x cpu ($0.13: the GPU node runs the GPU step and one
    CPU step, three CPU nodes the other five)."""
    classes = [
        mclass("cpu", 8, cores=1, price=0.10),
        mclass("gpu", 4, cores=1, gpus=1, price=2.0),
        mclass("gpu.big", 4, cores=1, gpus=1, memory_gib=256, price=6.0),
    ]
    steps = [task("train", opt("gpu", "gpu", 100, gpus=1), opt("gpu", "gpu.big", 100, gpus=1))]
    steps += [
        task(f"c{i}", opt("cpu", "cpu", 100), opt("cpu", "gpu", 100), opt("cpu", "gpu.big", 100)) for i in range(6)
    ]
    return instance(steps, [], classes)


def anchors(inst: Instance, deadline: float, **kw: int) -> tuple[Anchors, list[tuple[int, ...]]]:
    """The anchors with the tests' list scheduler, and every cluster planned."""
    asked: list[tuple[int, ...]] = []

    def evaluate(counts: tuple[int, ...]) -> ClusterPoint | None:
        asked.append(counts)
        sub = restrict(inst, {c.name: n for c, n in zip(inst.classes, counts, strict=True)})
        if sub is None:
            return None
        plan = list_schedule(sub)
        rate = sum(c.price_per_hour * n for c, n in zip(inst.classes, counts, strict=True))
        kept = tuple((c.name, n) for c, n in zip(inst.classes, counts, strict=True) if n)
        return ClusterPoint(kept, plan.makespan, rate * plan.makespan / 3600, rate, plan)

    limits = tuple(c.count for c in inst.classes)
    return search_anchors(inst, evaluate, limits, deadline, max_evaluations=kw.get("budget")), asked


@pytest.mark.parametrize(
    "steps, deadline, want",
    [
        pytest.param(9, 300.0, (("slow", 3),), id="fewest-cheap-nodes: 3 slow run 9 steps in 300s"),
        pytest.param(10, 300.0, (("slow", 5),), id="one-more-is-cheaper: 5 slow finish in 200s for less than 4"),
        pytest.param(9, 90.0, (("fast", 3),), id="slow-cannot-meet-it: 3 fast run 9 steps in 75s"),
    ],
)
def test_best_single_type_is_searched_not_the_common_denominator(
    steps: int, deadline: float, want: tuple[tuple[str, int], ...]
) -> None:
    inst = bag(steps)
    a, _ = anchors(inst, deadline)
    assert a.single is not None
    assert a.single.counts == want
    assert a.single.makespan <= deadline
    assert common_denominator(inst) == "big"  # the rule's type is not the answer
    by_type = {c.types: c for c in a.singles}
    assert by_type[("big",)].point is None or by_type[("big",)].point.cost > a.single.cost
    # no single type meets the deadline for less: every count of every type, by brute force
    for c in inst.classes:
        for n in range(1, c.count + 1):
            counts = tuple(n if k is c else 0 for k in inst.classes)
            plan = list_schedule(restrict(inst, {c.name: n}) or inst)
            cost = c.price_per_hour * n * plan.makespan / 3600
            assert plan.makespan > deadline + 1e-9 or cost >= a.single.cost - 1e-12, counts


def test_slow_cannot_meet_a_deadline_below_its_critical_path_and_is_not_planned() -> None:
    a, asked = anchors(bag(9), 90.0)
    slow = next(c for c in a.singles if c.types == ("slow",))
    assert slow.point is None and "critical path alone takes 1m40s" in slow.why
    assert not [counts for counts in asked if counts[0] and not any(counts[1:])]  # no slow-only cluster


def test_best_pair_is_the_known_cheapest_mix() -> None:
    inst = cpu_and_gpu()
    a, _ = anchors(inst, 200.0)
    assert a.single is not None and a.single.counts == (("gpu", 4),)
    assert a.pair is not None and a.pair.counts == (("cpu", 3), ("gpu", 1))
    assert a.pair.cost == pytest.approx(2.3 * 200 / 3600)
    cpu = next(c for c in a.singles if c.types == ("cpu",))
    assert cpu.point is None and cpu.why == "cannot run every step"  # the GPU step
    assert all(c.types != ("cpu",) for c in a.pairs if c.point is not None and len(c.types) == 1)


def test_savings_are_against_the_searched_anchors() -> None:
    inst = cpu_and_gpu()
    r = search_virtual_cluster(inst, list_schedule, deadline=200.0)
    c = r.comparison
    assert c is not None and c.virtual is not None and c.single is not None and c.pair is not None
    assert c.deadline == 200.0 and c.deadline_rule == "the deadline given"
    assert c.single.counts == (("gpu", 4),)
    assert c.pair.counts == (("cpu", 3), ("gpu", 1))
    assert c.virtual.cost <= c.pair.cost  # the cheapest of all the searches found
    assert c.saving_vs_single == pytest.approx(1 - c.virtual.cost / c.single.cost)
    assert c.saving_vs_pair == pytest.approx(1 - c.virtual.cost / c.pair.cost)
    assert c.saving_vs_single is not None and c.saving_vs_single > 0.6
    assert r.chosen == c.virtual
    # the strawman is the rule's type, dearer than the searched single type
    assert r.common_type == "gpu.big" and r.strawman is not None
    assert r.strawman.common.cost > c.single.cost
    text = r.render()
    assert f"cheapest single type meeting it: {c.single.describe()}" in text
    assert f"best two-type mix: {c.pair.describe()}" in text
    assert f"costs {c.saving_vs_single:.0%} less than the first and {c.saving_vs_pair:.0%} less than the second" in text
    assert text.index("cheapest single type") < text.index("strawman")  # the headline comes first
    data = json.loads(json.dumps(r.to_json()))
    assert data["comparison"]["best_single"]["counts"] == {"gpu": 4}
    assert data["comparison"]["best_pair"]["counts"] == {"cpu": 3, "gpu": 1}
    assert data["comparison"]["saving_vs_single"] == pytest.approx(c.saving_vs_single)
    assert data["strawman"]["saving"] == pytest.approx(r.strawman.saving)


def test_a_cheaper_cluster_from_the_anchor_search_is_the_one_recommended() -> None:
    # With one planning for the virtual search it sees little; the anchors find the mix.
    inst = cpu_and_gpu()
    r = search_virtual_cluster(inst, list_schedule, deadline=200.0, max_evaluations=1)
    c = r.comparison
    assert c is not None and c.virtual is not None and c.pair is not None
    assert c.virtual == c.pair == r.chosen
    assert c.saving_vs_pair == 0.0
    assert "the cheapest cluster found is itself a two-type mix" in r.render()


def test_the_budget_bounds_the_plannings_and_is_reported() -> None:
    a, asked = anchors(cpu_and_gpu(), 200.0, budget=3)
    assert len(set(asked)) <= 3 and a.plannings <= 3
    assert a.capped
    assert any("budget of 3 plannings" in c.why for c in (*a.singles, *a.pairs))


def test_the_search_is_deterministic() -> None:
    a, asked_a = anchors(cpu_and_gpu(), 200.0)
    b, asked_b = anchors(cpu_and_gpu(), 200.0)
    assert asked_a == asked_b and a.single == b.single and a.pair == b.pair


def test_cluster_plan_cli_shows_both_anchors() -> None:
    from typer.testing import CliRunner

    from hetflow.cli.main import app, register_commands

    register_commands(["cluster"])
    args = ["cluster", "plan", "examples/circuit/workflow.yaml", "--catalog", "examples/clusters/catalog.yaml"]
    text = CliRunner().invoke(app, [*args, "--deadline", "10s"])
    assert text.exit_code == 0, text.output
    assert "at a deadline of 10.0s (the deadline given):" in text.output
    assert "cheapest single type meeting it:" in text.output and "best two-type mix:" in text.output
    assert text.output.index("cheapest single type") < text.output.index("strawman")
    out = CliRunner().invoke(app, [*args, "--deadline", "10s", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)["comparison"]
    assert data["deadline"] == 10.0
    assert data["best_single"] is not None and data["saving_vs_single"] is not None
    assert {"best_pair", "saving_vs_pair", "singles", "pairs", "found_by"} <= data.keys()
