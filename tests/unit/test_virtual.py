"""Virtual clusters: the frontier, the chosen point, and the common-denominator comparison."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Sequence
from functools import cache

import pytest

from hetflow.errors import NoFitError
from hetflow.plan.build import build_instance
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Instance, MachineClass, Plan, Task
from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.plan.sizing.pareto import pareto
from hetflow.plan.sizing.results import VirtualClusterResult
from hetflow.plan.sizing.virtual import common_denominator, plan_virtual_cluster, restrict, search_virtual_cluster
from hetflow.spec.models import Workflow
from tests.unit.builders import load_steps
from tests.unit.test_simulate_support import chain_and_fork, instance, list_schedule, mclass, opt, task

# A prep step fans out to eight CPU-only aligners and eight steps that run on a CPU or,
# eight times faster, on a GPU; a GPU-only training step joins the latter; a report joins all.
ALIGN = "".join(
    f"""
align-{i}:
  needs: [prep]
  image: img
  resources: {{cpus: 4, memory: 8Gi}}
  estimate: {100 + 20 * i}
"""
    for i in range(8)
)
ANALYZE = "".join(
    f"""
analyze-{i}:
  needs: [prep]
  variants:
    cpu: {{image: img, resources: {{cpus: 4, memory: 4Gi}}, estimate: 400}}
    gpu: {{image: img, resources: {{cpus: 2, memory: 4Gi, gpus: 1}}, estimate: 50}}
"""
    for i in range(8)
)
BODY = (
    """
prep:
  image: img
  resources: {cpus: 2, memory: 2Gi}
  estimate: 60
"""
    + ALIGN
    + ANALYZE
    + f"""
train:
  needs: [{", ".join(f"analyze-{i}" for i in range(8))}]
  image: img
  resources: {{cpus: 2, memory: 8Gi, gpus: 1}}
  estimate: 120
report:
  needs: [train, {", ".join(f"align-{i}" for i in range(8))}]
  image: img
  estimate: 30
"""
)
CATALOG = (
    mclass("cpu.small", 8, cores=8, memory_gib=32, price=0.40),
    mclass("gpu.one", 4, cores=8, memory_gib=64, gpus=1, price=3.0),
)
BANDWIDTH = 1.25e9


@cache
def workflow() -> Workflow:
    return load_steps(BODY).workflow


@cache
def result(deadline: float | None = None, budget: float | None = None) -> VirtualClusterResult:
    return plan_virtual_cluster(workflow(), CATALOG, bandwidth=BANDWIDTH, deadline=deadline, budget=budget)


def dominates(p: ClusterPoint, q: ClusterPoint) -> bool:
    return p.makespan <= q.makespan and p.cost <= q.cost and (p.makespan, p.cost) != (q.makespan, q.cost)


CASES = [
    pytest.param({}, id="knee"),
    pytest.param({"deadline": 700.0}, id="deadline"),
    pytest.param({"budget": 0.9}, id="budget"),
    pytest.param({"deadline": 10.0}, id="impossible-deadline"),
]


# --- the frontier ------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", CASES)
def test_frontier_is_sorted_and_non_dominated(kw: dict[str, float]) -> None:
    r = result(**kw)
    f = r.frontier
    assert len(f) >= 3
    assert all(a.makespan < b.makespan and a.cost > b.cost for a, b in itertools.pairwise(f))
    assert f == pareto(r.points)
    for p in f:
        assert not any(dominates(q, p) for q in r.points)
    assert r.evaluated >= len(r.points)


@pytest.mark.parametrize("kw", CASES)
def test_every_point_is_priced_as_a_rented_cluster_and_its_plan_is_valid(kw: dict[str, float]) -> None:
    price = {c.name: c.price_per_hour for c in CATALOG}
    for p in result(**kw).points:
        rate = sum(n * price[t] for t, n in p.counts)
        assert p.rate == pytest.approx(rate)
        assert p.cost == pytest.approx(rate * p.makespan / 3600)
        assert p.makespan == pytest.approx(p.plan.makespan)
        cluster = build_instance(workflow(), p.classes(CATALOG), bandwidth=BANDWIDTH)
        assert check_plan(cluster, p.plan) == []


def test_the_search_is_deterministic() -> None:
    a = plan_virtual_cluster(workflow(), CATALOG, bandwidth=BANDWIDTH, deadline=700)
    assert a.frontier == result(deadline=700.0).frontier
    assert a.chosen == result(deadline=700.0).chosen
    assert a.comparison == result(deadline=700.0).comparison
    assert a.strawman == result(deadline=700.0).strawman


# --- the chosen point ------------------------------------------------------------------------------


def test_deadline_gives_the_cheapest_point_meeting_it() -> None:
    r = result(deadline=700.0)
    assert r.chosen is not None
    assert r.chosen.makespan <= 700
    assert r.chosen.cost == min(p.cost for p in r.points if p.makespan <= 700)
    assert r.rule == "the cheapest cluster meeting the deadline of 11m40s"


def test_budget_gives_the_fastest_point_within_it() -> None:
    r = result(budget=0.9)
    assert r.chosen is not None
    assert r.chosen.cost <= 0.9
    assert r.chosen.makespan == min(p.makespan for p in r.points if p.cost <= 0.9)


def test_no_limit_gives_the_knee() -> None:
    r = result()
    assert r.chosen is not None
    assert r.chosen in r.frontier
    assert r.chosen not in (r.frontier[0], r.frontier[-1])  # a trade-off, not an extreme
    assert "knee" in r.rule


@pytest.mark.parametrize(
    "kw, says",
    [
        pytest.param({"deadline": 10.0}, "no cluster found meets the deadline of 10.0s; the fastest", id="deadline"),
        pytest.param({"budget": 0.01}, "no cluster found costs at most $0.01; the cheapest found costs", id="budget"),
        pytest.param({"deadline": 700.0, "budget": 0.01}, "meets the deadline of 11m40s within $0.01", id="both"),
    ],
)
def test_a_limit_no_cluster_meets_is_a_value_that_explains_itself(kw: dict[str, float], says: str) -> None:
    r = result(**kw)
    assert r.chosen is None
    assert says in r.rule
    assert r.frontier  # what was found is still there to look at


# --- the common denominator ---------------------------------------------------------------------------


def test_common_denominator_at_the_deadline() -> None:
    r = result(deadline=700.0)
    assert r.common_type == "gpu.one"  # train runs only on a GPU
    c = r.strawman
    assert c is not None and r.common is not None
    assert [t for t, _ in c.common.counts] == ["gpu.one"]
    assert c.deadline == 700
    assert c.common.makespan <= 700
    # the fewest GPU nodes that meet the deadline: one fewer does not
    fewer = [p for p in r.points if p.counts == (("gpu.one", c.common.count("gpu.one") - 1),)]
    assert all(p.makespan > 700 for p in fewer)
    assert c.virtual == r.chosen
    assert c.saving == pytest.approx(1 - c.virtual.cost / c.common.cost)
    assert c.saving >= 0.30  # the talk's claim, on a workflow built like its example


def test_common_denominator_without_a_deadline_is_sized_for_the_chosen_point() -> None:
    r = result()
    assert r.chosen is not None and r.strawman is not None
    c = r.strawman
    assert c.common.makespan <= r.chosen.makespan
    assert c.deadline == r.chosen.makespan
    assert c.virtual.cost <= r.chosen.cost


def test_common_denominator_that_cannot_meet_the_deadline_is_compared_at_its_best() -> None:
    r = result(deadline=10.0)
    c = r.strawman
    assert c is not None
    gpu_only = [p for p in r.points if [t for t, _ in p.counts] == ["gpu.one"]]
    assert c.common.makespan == min(p.makespan for p in gpu_only)
    assert c.deadline == c.common.makespan
    assert c.virtual.makespan <= c.deadline
    assert 0 <= c.saving == pytest.approx(1 - c.virtual.cost / c.common.cost)


@pytest.mark.parametrize(
    "classes, tasks, want",
    [
        pytest.param(
            [mclass("cpu.big", memory_gib=512), mclass("gpu.s", gpus=1, memory_gib=32), mclass("gpu.l", gpus=1)],
            [task("t", opt("gpu", "gpu.s", 1, gpus=1), opt("gpu", "gpu.l", 1, gpus=1))],
            "gpu.s",
            id="gpu-only-step-picks-the-gpu-type-with-most-memory",
        ),
        pytest.param(
            [mclass("cpu", memory_gib=64), mclass("himem", memory_gib=256), mclass("gpu", gpus=1, memory_gib=128)],
            [task("t", opt("cpu", "cpu", 1), opt("cpu", "himem", 1), opt("cpu", "gpu", 1))],
            "himem",
            id="otherwise-the-most-memory",
        ),
        pytest.param(
            [mclass("a", price=2.0), mclass("b", price=1.0)],
            [task("t", opt("cpu", "a", 1), opt("cpu", "b", 1))],
            "b",
            id="tie-goes-to-the-cheaper",
        ),
        pytest.param(
            [mclass("cpu"), mclass("gpu", gpus=1)],
            [task("c", opt("cpu", "cpu", 1)), task("g", opt("gpu", "gpu", 1, gpus=1))],
            None,
            id="no-type-runs-everything",
        ),
    ],
)
def test_common_denominator_type(classes: list[MachineClass], tasks: list[Task], want: str | None) -> None:
    assert common_denominator(instance(tasks, [], classes)) == want


# --- the search on instances, with the tests' own list scheduler --------------------------------------


def counting(planner: Callable[[Instance], Plan]) -> tuple[list[Instance], Callable[[Instance], Plan]]:
    calls: list[Instance] = []

    def plan(inst: Instance) -> Plan:
        calls.append(inst)
        return planner(inst)

    return calls, plan


def test_search_on_an_instance_with_a_plugged_planner() -> None:
    inst = chain_and_fork()
    calls, planner = counting(list_schedule)
    r = search_virtual_cluster(inst, planner, max_evaluations=12, anchor_evaluations=5)
    assert r.frontier and r.chosen is not None
    # every plan was made on a cluster within the catalog's limits
    for sub in calls:
        assert all(c.count <= inst.machine_class(c.name).count for c in sub.classes)
    # the cap holds, give or take the few plannings that size the common denominator and the
    # anchors' budget in each of (at most) four rounds
    limit = max(c.count for c in inst.classes)
    assert len(calls) <= 12 + 2 * math.ceil(math.log2(limit + 1)) + 1 + 4 * 5


def test_max_per_type_caps_every_count() -> None:
    r = plan_virtual_cluster(workflow(), CATALOG, bandwidth=BANDWIDTH, max_per_type=2)
    assert all(n <= 2 for p in r.points for _, n in p.counts)


def test_restrict_drops_classes_and_options() -> None:
    inst = chain_and_fork()
    sub = restrict(inst, {"cpu": 1, "gpu": 1})
    assert sub is not None and [(c.name, c.count) for c in sub.classes] == [("cpu", 1), ("gpu", 1)]
    only_cpu = restrict(inst, {"cpu": 2})
    assert only_cpu is None  # task c runs only on a GPU
    no_gpu_task = dataclasses.replace(inst, tasks=tuple(t for t in inst.tasks if t.name != "c"))
    cpu = restrict(no_gpu_task, {"cpu": 2})
    assert cpu is not None and {o.machine_class for t in cpu.tasks for o in t.options} == {"cpu"}


def point(makespan: float, cost: float) -> ClusterPoint:
    return ClusterPoint((("x", 1),), makespan, cost, 1.0, Plan({}, makespan, 0.0, "test"))


@pytest.mark.parametrize(
    "points, want",
    [
        pytest.param([(1, 5), (2, 4), (3, 3)], [(1, 5), (2, 4), (3, 3)], id="all-trade-offs"),
        pytest.param([(3, 3), (1, 5), (2, 6)], [(1, 5), (3, 3)], id="slower-and-dearer-dropped"),
        pytest.param([(1, 5), (1, 4), (2, 4)], [(1, 4)], id="ties-keep-the-best"),
        pytest.param([], [], id="empty"),
    ],
)
def test_pareto(points: Sequence[tuple[float, float]], want: list[tuple[float, float]]) -> None:
    assert [(p.makespan, p.cost) for p in pareto([point(m, c) for m, c in points])] == want


@pytest.mark.parametrize(
    "kw, error, match",
    [
        pytest.param({"common_type": "gpu.huge"}, ValueError, "not a catalog type", id="unknown-common-type"),
        pytest.param({"deadline": 0.0}, ValueError, "deadline must be positive", id="zero-deadline"),
        pytest.param({"budget": -1.0}, ValueError, "budget must be non-negative", id="negative-budget"),
    ],
)
def test_bad_arguments(kw: dict[str, object], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        plan_virtual_cluster(workflow(), CATALOG, bandwidth=BANDWIDTH, **kw)  # type: ignore[arg-type]


def test_a_step_no_catalog_type_can_run() -> None:
    wf = load_steps(BODY + "huge:\n  image: img\n  resources: {memory: 1Ti}\n").workflow
    with pytest.raises(NoFitError, match="huge"):
        plan_virtual_cluster(wf, CATALOG, bandwidth=BANDWIDTH)


def test_json_and_text() -> None:
    r = result(deadline=700.0)
    assert r.chosen is not None and r.strawman is not None
    data = json.loads(json.dumps(r.to_json()))
    assert data["chosen"]["counts"] == dict(r.chosen.counts)
    assert data["strawman"]["saving"] == pytest.approx(r.strawman.saving)
    assert len(data["frontier"]) == len(r.frontier)
    text = r.render()
    assert f"  * {r.chosen.describe()}" in text
    assert f"costs {r.strawman.saving:.0%} less (this saving flatters" in text
    assert "none chosen: no cluster found meets" in result(deadline=10.0).render()
