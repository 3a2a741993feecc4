"""The plan simulator: exact replay without noise, seeded noise, and the invariants."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.plan.checking.simulator import simulate
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Instance, Placement, Plan
from tests.unit.test_simulate_support import (
    GIB,
    chain_and_fork,
    instance,
    list_schedule,
    mclass,
    opt,
    schedule,
    task,
)


def violations(inst: Instance, plan: Plan) -> list[str]:
    """Precedence (with transfer time), capacity and GPU exclusivity, as readable strings."""
    out: list[str] = []
    pl = plan.placements
    for e in inst.edges:
        comm = 0.0 if pl[e.parent].machine == pl[e.child].machine else e.bytes / inst.bandwidth
        if pl[e.child].start < pl[e.parent].finish + comm - 1e-6:
            out.append(f"{e.child} starts before {e.parent}'s data arrive")
    for p in pl.values():
        cls = inst.machine_class(p.machine_class)
        live = [q for q in pl.values() if q.machine == p.machine and q.start <= p.start + 1e-9 < q.finish]
        if inst.one_task_per_machine and len(live) > 1:
            out.append(f"{p.machine} runs {len(live)} tasks at {p.start}")
        if sum(q.cores for q in live) > cls.cores + 1e-9 or sum(q.memory for q in live) > cls.memory:
            out.append(f"{p.machine} over capacity at {p.start}")
        gpus = [g for q in live for g in q.gpus]
        if len(gpus) != len(set(gpus)) or any(g >= cls.gpus for g in gpus):
            out.append(f"{p.machine} GPU given twice at {p.start}")
    return out


def hand_plan() -> tuple[Instance, Plan]:
    """prep -> {a on GPU 1, b on cpu-1} -> join; transfers of 1 s and 2 s by construction."""
    cpu, gpu = mclass("cpu", 2, cores=4, price=0.5), mclass("gpu", 1, cores=8, gpus=2, price=4.0)
    inst = instance(
        [
            task("prep", opt("default", "cpu", 10, cores=2)),
            task("a", opt("gpu", "gpu", 8, cores=2, gpus=1)),
            task("b", opt("cpu", "cpu", 30, cores=4)),
            task("join", opt("default", "cpu", 5)),
        ],
        [("prep", "a", 1e9), ("prep", "b", 0), ("a", "join", 2e9), ("b", "join", 0)],
        [cpu, gpu],
        bandwidth=1e9,
    )
    m = GIB
    pl = {
        "prep": Placement("prep", "default", "cpu-0", "cpu", 0, 10, 2, m),
        "a": Placement("a", "gpu", "gpu-0", "gpu", 11, 19, 2, m, (1,)),
        "b": Placement("b", "cpu", "cpu-1", "cpu", 10, 40, 4, m),
        "join": Placement("join", "default", "cpu-1", "cpu", 40, 45, 1, m),
    }
    return inst, Plan(pl, 45.0, 0.0, "hand")


# --- replay without noise ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(hand_plan, id="hand-made"),
        pytest.param(lambda: (i := chain_and_fork(), list_schedule(i)), id="list-scheduled"),
        pytest.param(lambda: (i := chain_and_fork(), schedule(i)), id="planner"),
        pytest.param(
            lambda: (i := dataclasses.replace(chain_and_fork(), one_task_per_machine=True), schedule(i)),
            id="one-task-per-machine",
        ),
    ],
)
def test_noise_zero_replays_the_plan(make: object) -> None:
    inst, plan = make()  # type: ignore[operator]
    res = simulate(inst, plan, noise=0.0)
    assert res.makespan == pytest.approx(plan.makespan)
    assert res.planned_makespan == plan.makespan
    for name, p in plan.placements.items():
        q = res.plan.placements[name]
        assert (q.machine, q.variant, q.gpus) == (p.machine, p.variant, p.gpus)
        assert q.start == pytest.approx(p.start) and q.finish == pytest.approx(p.finish)
    assert violations(inst, res.plan) == []
    assert check_plan(inst, res.plan) == []


def test_hand_plan_cost_and_utilization() -> None:
    inst, plan = hand_plan()
    res = simulate(inst, plan, noise=0.0)
    # dominant shares: prep 2/4 cores, a 1/2 GPUs, b 4/4 cores, join 1/4 cores
    want = (10 * 0.5 * 0.5 + 8 * 4.0 * 0.5 + 30 * 0.5 * 1.0 + 5 * 0.5 * 0.25) / 3600
    assert res.cost == pytest.approx(want)
    assert res.plan.cost == pytest.approx(want)
    cpu, gpu = res.utilization["cpu"], res.utilization["gpu"]
    assert cpu.cpu == pytest.approx((2 * 10 + 4 * 30 + 1 * 5) / (4 * 2 * 45))
    assert cpu.gpu is None
    assert gpu.cpu == pytest.approx(2 * 8 / (8 * 1 * 45))
    assert gpu.gpu == pytest.approx(8 / (2 * 1 * 45))
    assert res.slowdown == pytest.approx(1.0)


def test_the_simulation_closes_a_gap_the_plan_left() -> None:
    """A plan with idle time that no dependency forces finishes earlier when replayed."""
    inst, plan = hand_plan()
    late = dict(plan.placements)
    late["join"] = dataclasses.replace(late["join"], start=50, finish=55)
    res = simulate(inst, dataclasses.replace(plan, placements=late, makespan=55), noise=0.0)
    assert res.makespan == pytest.approx(45)


# --- noise ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4], ids=lambda s: f"seed{s}")
def test_noise_keeps_the_assignment_and_precedence(seed: int) -> None:
    inst = chain_and_fork()
    plan = schedule(inst)
    res = simulate(inst, plan, noise=0.5, seed=seed)
    assert violations(inst, res.plan) == []
    for name, p in plan.placements.items():
        q = res.plan.placements[name]
        assert (q.machine, q.variant, q.gpus) == (p.machine, p.variant, p.gpus)
        factor = (q.finish - q.start) / (p.finish - p.start)
        assert 0.5 - 1e-9 <= factor <= 1.5 + 1e-9
        assert factor == pytest.approx(res.runtime_factors[name])
    for u in res.utilization.values():
        assert 0.0 <= u.cpu <= 1.0
        assert u.gpu is None or 0.0 <= u.gpu <= 1.0


def test_same_seed_same_result_other_seed_other_result() -> None:
    inst = chain_and_fork()
    plan = schedule(inst)
    one, two, other = (simulate(inst, plan, noise=0.3, seed=s) for s in (7, 7, 8))
    assert one == two
    assert one.makespan != other.makespan


@pytest.mark.parametrize(
    "make, noise, match",
    [
        pytest.param(hand_plan, 1.0, "noise must be in", id="noise-too-large"),
        pytest.param(hand_plan, -0.1, "noise must be in", id="noise-negative"),
    ],
)
def test_bad_noise(make: object, noise: float, match: str) -> None:
    inst, plan = make()  # type: ignore[operator]
    with pytest.raises(ValueError, match=match):
        simulate(inst, plan, noise=noise)


def test_plans_that_do_not_fit_the_instance_are_refused() -> None:
    inst, plan = hand_plan()
    pl = dict(plan.placements)
    with pytest.raises(ValueError, match="places no join"):
        simulate(inst, dataclasses.replace(plan, placements={k: v for k, v in pl.items() if k != "join"}))
    with pytest.raises(ValueError, match="not one of its options"):
        simulate(inst, dataclasses.replace(plan, placements={**pl, "b": dataclasses.replace(pl["b"], variant="gpu")}))
    with pytest.raises(ValueError, match="does not have"):
        simulate(inst, dataclasses.replace(plan, placements={**pl, "b": dataclasses.replace(pl["b"], machine="cpu-7")}))
    # join planned first on prep's machine: cpu-0 waits for join, join for prep, forever.
    early = {**pl, "join": dataclasses.replace(pl["join"], machine="cpu-0", start=-1, finish=4)}
    with pytest.raises(ValueError, match="cannot run in its own order"):
        simulate(inst, dataclasses.replace(plan, placements=early))


# --- properties on random instances -----------------------------------------------------------------


@st.composite
def random_instances(draw: st.DrawFn) -> Instance:
    n = draw(st.integers(1, 8))
    classes = [mclass("cpu", draw(st.integers(1, 2)), cores=4), mclass("gpu", 1, cores=4, gpus=2, price=3)]
    tasks = []
    for i in range(n):
        rt = draw(st.integers(1, 50))
        options = [opt("cpu", "cpu", rt, cores=draw(st.integers(1, 4)))]
        if draw(st.booleans()):
            options.append(opt("gpu", "gpu", max(1, rt // 4), cores=1, gpus=draw(st.integers(1, 2))))
        tasks.append(task(f"t{i}", *options))
    edges = [
        (f"t{i}", f"t{j}", float(draw(st.integers(0, 3))) * 1e9)
        for j in range(n)
        for i in range(j)
        if draw(st.integers(0, 3)) == 0
    ]
    return instance(tasks, edges, classes, bandwidth=1e9, one_task_per_machine=draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(random_instances(), st.integers(0, 10_000), st.floats(0.0, 0.9), st.booleans())
def test_simulation_invariants(inst: Instance, seed: int, noise: float, planner: bool) -> None:
    plan = schedule(inst) if planner else list_schedule(inst)
    assert violations(inst, plan) == []
    exact = simulate(inst, plan, noise=0.0)
    assert exact.makespan == pytest.approx(plan.makespan)  # list-scheduled plans leave no gap to close
    assert check_plan(inst, exact.plan) == []
    assert all(q.start <= plan.placements[k].start + 1e-6 for k, q in exact.plan.placements.items())
    res = simulate(inst, plan, noise=noise, seed=seed)
    assert violations(inst, res.plan) == []
    assert res == simulate(inst, plan, noise=noise, seed=seed)
    for u in res.utilization.values():
        assert 0.0 <= u.cpu <= 1.0
        assert u.gpu is None or 0.0 <= u.gpu <= 1.0


def test_json_and_text() -> None:
    inst, plan = hand_plan()
    res = simulate(inst, plan, noise=0.0)
    data = json.loads(json.dumps(res.to_json()))
    assert data["makespan"] == pytest.approx(45) and data["slowdown"] == pytest.approx(1.0)
    assert data["utilization"]["cpu"]["gpu"] is None
    assert {p["task"] for p in data["placements"]} == {"prep", "a", "b", "join"}
    text = res.render()
    assert "simulated makespan 45.0s (planned 45.0s, x1.00)" in text
    assert "gpu: cores 4%, GPUs 9%" in text
