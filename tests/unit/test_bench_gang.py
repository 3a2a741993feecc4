"""bench.planning.gang on tiny fixed cases: the anchors do what the benchmark says they do.

No GPU involved: NVLink and RDMA are class attributes, and every time is the gang model's."""

from __future__ import annotations

import pytest
from bench.planning.gang import (
    GangJob,
    aware_and_blind,
    gang_instance,
    make_jobs,
    nvlink_joined,
    retime,
    score,
)
from bench.planning.gang_online import simulate_online

from hetflow.plan.feasible.gangs import NVLINK_BW, gang_runtime
from hetflow.plan.instance import MachineClass
from hetflow.plan.search.heuristic import plan_heuristic

BW = 1.25e9
NV = MachineClass("nv8", 1, 96, 1024 * 1024**3, gpus=8, gpu_link="nvlink", nvlink_gpus=8, rdma=True)
PCIE = MachineClass("pcie4", 2, 32, 256 * 1024**3, gpus=4, gpu_link="pcie")
SMALL = MachineClass("small", 2, 32, 256 * 1024**3, gpus=2, gpu_link="pcie")

# The NVLink node is busy for 2,000 s with an 8-GPU job; a gang of 2 replicas x 4 GPUs could
# start at once on the two PCIe nodes (its ring then crosses the 1.25 GB/s network: +4,000 s)
# or wait for the NVLink node (+17 s of exchange).
BUSY = GangJob("busy", 1, 8, 2000.0, 0.0)
TRAIN = GangJob("train", 2, 4, 1000.0, 5e12)


def test_the_blind_anchor_puts_4_gpu_replicas_on_pcie_where_the_aware_planner_waits_for_nvlink() -> None:
    true = gang_instance([BUSY, TRAIN], [NV, PCIE], BW)
    blind = gang_instance([BUSY, TRAIN], [NV, PCIE], BW, blind=True)
    aware_plan = plan_heuristic(true, seed=0, effort=40)
    blind_plan = plan_heuristic(blind, seed=0, effort=40)
    a, b = aware_plan.placements["train"], blind_plan.placements["train"]
    assert {m for m, _g in b.ranks} == {"pcie4-0", "pcie4-1"}
    assert not any(nvlink_joined(PCIE, g) for _m, g in b.ranks)
    assert {m for m, _g in a.ranks} == {"nv8-0"}
    assert all(len(g) == 4 and nvlink_joined(NV, g) for _m, g in a.ranks)
    aware, blind_score = aware_and_blind([BUSY, TRAIN], [NV, PCIE], BW, seed=0, effort=40)
    # busy's 8 GPUs share NVLink in both; train's two replicas only in the aware plan
    assert aware.nvlink_share == 1.0
    assert blind_score.nvlink_share == pytest.approx(1 / 3)
    assert (aware.ethernet_share, blind_score.ethernet_share) == (0.0, 1.0)
    assert aware.makespan == pytest.approx(2000.0 + 1000.0 + 5e12 / NVLINK_BW)
    assert blind_score.makespan == pytest.approx(1000.0 + 5e12 / BW)  # the blind plan, re-timed


def test_retiming_uses_the_true_model() -> None:
    true = gang_instance([BUSY, TRAIN], [NV, PCIE], BW)
    blind_plan = plan_heuristic(gang_instance([BUSY, TRAIN], [NV, PCIE], BW, blind=True), seed=0, effort=40)
    p = blind_plan.placements["train"]
    assert p.finish - p.start == pytest.approx(1000.0)  # what the blind planner believed
    q = retime(true, blind_plan).placements["train"]
    task = true.task("train")
    option = next(o for o in task.options if o.machine_class == "pcie4")
    assert q.ranks == p.ranks  # the same placement ...
    assert q.finish - q.start == pytest.approx(gang_runtime(true, task, option, 2))  # ... timed by the true model
    aware_plan = plan_heuristic(true, seed=0, effort=40)
    replay = retime(true, aware_plan)  # a plan made with the true model replays unchanged
    for name, r in replay.placements.items():
        assert (r.start, r.finish) == pytest.approx(
            (aware_plan.placements[name].start, aware_plan.placements[name].finish)
        )
    assert score(true, replay).gpu_hours == pytest.approx((8 * 2000.0 + 8 * (1000.0 + 5e12 / NVLINK_BW)) / 3600)


# Two gangs of 2 replicas x 2 GPUs on two 2-GPU nodes.
PAIR = [GangJob("a", 2, 2, 100.0, 0.0), GangJob("b", 2, 2, 100.0, 0.0)]


@pytest.mark.parametrize(
    ("pods", "deadlocked", "completed"),
    [
        pytest.param([(0, 0), (1, 0), (0, 1), (1, 1)], True, 0, id="interleaved-pods-deadlock"),
        pytest.param([(0, 0), (0, 1), (1, 0), (1, 1)], False, 2, id="gang-by-gang-pods-run"),
    ],
)
def test_replica_by_replica_deadlocks_when_pods_interleave(
    pods: list[tuple[int, int]], deadlocked: bool, completed: int
) -> None:
    anchor = simulate_online(PAIR, [SMALL], BW, pods, gang_aware=False, horizon=200.0)
    assert (anchor.deadlocked, anchor.completed) == (deadlocked, completed)
    if deadlocked:
        assert anchor.stuck_gpus == 4 and anchor.makespan == float("inf")
        assert anchor.idle_gpu_hours == pytest.approx(4 * 200.0 / 3600)  # every GPU held until the horizon
    whole = simulate_online(PAIR, [SMALL], BW, pods, gang_aware=True)
    assert (whole.deadlocked, whole.completed, whole.idle_gpu_hours) == (False, 2, 0.0)
    assert whole.makespan == pytest.approx(200.0)  # one gang after the other


def test_a_replica_that_waits_for_its_peer_holds_its_gpus_idle() -> None:
    # A 2-GPU job holds node 0 for an hour; the gang's first replica binds node 1 at once and
    # waits there for that hour: 2 GPUs x 1 h idle.  All-or-nothing waits holding nothing.
    jobs = [GangJob("long", 1, 2, 3600.0, 0.0), GangJob("g", 2, 2, 100.0, 0.0)]
    pods = [(0, 0), (1, 0), (1, 1)]
    anchor = simulate_online(jobs, [SMALL], BW, pods, gang_aware=False)
    whole = simulate_online(jobs, [SMALL], BW, pods, gang_aware=True)
    assert (anchor.deadlocked, anchor.completed) == (False, 2)
    assert anchor.makespan == pytest.approx(3700.0)
    assert anchor.idle_gpu_hours == pytest.approx(2.0)
    assert whole.idle_gpu_hours == 0.0
    assert whole.makespan == pytest.approx(3700.0)


def test_the_workload_is_seeded_and_every_gang_fits_one_class() -> None:
    jobs = make_jobs(60, 7)
    assert jobs == make_jobs(60, 7) and jobs != make_jobs(60, 8)
    assert all(1 <= j.replicas * j.gpus <= 16 and 600.0 <= j.compute <= 4 * 3600.0 for j in jobs)
    assert all(0.1e9 * j.compute <= j.comm <= 3e9 * j.compute for j in jobs)
