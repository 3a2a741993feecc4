"""Gang steps in the planner: all replicas at once, one class, per_node, the comm model.

The classes here are made up (no GPU involved): NVLink and RDMA are class attributes."""

from __future__ import annotations

import pytest

from hetflow.errors import NoFitError
from hetflow.plan.build import build_instance
from hetflow.plan.checking.simulator import simulate
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.cost import plan_cost
from hetflow.plan.feasible.gangs import NVLINK_BW, PCIE_BW, RDMA_BW, comm_time
from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Plan, Task
from hetflow.plan.search.heuristic import plan_heuristic
from tests.unit.builders import load_steps

GIB = 1024**3
NV = MachineClass("nv4", 1, 32, 256 * GIB, gpus=4, gpu_link="nvlink", nvlink_gpus=4, price_per_hour=16)
PCIE = MachineClass("pcie2", 2, 32, 256 * GIB, gpus=2, gpu_model="A100", gpu_link="pcie", price_per_hour=8)


def gang_task(name: str, runtime: float, gpus: int, replicas: int, classes: list[MachineClass], **kw: float) -> Task:
    opts = tuple(Option("default", c.name, runtime, 4, 8 * GIB, gpus) for c in classes)
    return Task(name, opts, (), replicas, int(kw.get("per_node", 0)), float(kw.get("comm", 0.0)))


def test_the_comm_model_is_a_ring_allreduce_on_the_slowest_link() -> None:
    gib = float(GIB)
    # 4 replicas x 1 GPU on one NVLink node: 2 * 3/4 * 1 GiB at NVLink speed
    assert comm_time(NV, 4, 1, gib, 1, 1.25e9) == pytest.approx(1.5 * gib / NVLINK_BW)
    assert comm_time(PCIE, 2, 1, gib, 1, 1.25e9) == pytest.approx(1.0 * gib / PCIE_BW)
    assert comm_time(PCIE, 4, 1, gib, 2, 1.25e9) == pytest.approx(1.5 * gib / 1.25e9)  # across nodes: the network
    rdma = MachineClass("ib", 2, 8, GIB, gpus=2, rdma=True)
    assert comm_time(rdma, 4, 1, gib, 2, 1.25e9) == pytest.approx(1.5 * gib / RDMA_BW)
    assert comm_time(NV, 1, 4, gib, 1, 1.25e9) == 0.0  # one replica exchanges nothing


def test_a_gang_is_placed_whole_and_prefers_one_nvlink_node_to_two_pcie_nodes() -> None:
    inst = Instance((gang_task("train", 100.0, 1, 4, [NV, PCIE], comm=10 * GIB),), (), (NV, PCIE))
    plan = plan_heuristic(inst, seed=0)
    p = plan.placements["train"]
    assert check_plan(inst, plan) == []
    assert len(p.ranks) == 4 and {m for m, _ in p.ranks} == {"nv4-0"}
    assert sorted(g for _m, gpus in p.ranks for g in gpus) == [0, 1, 2, 3]  # each replica its own GPU
    assert p.finish == pytest.approx(100.0 + 15 * GIB / NVLINK_BW)


def test_without_an_nvlink_node_the_gang_spans_two_nodes_and_pays_the_network() -> None:
    inst = Instance((gang_task("train", 100.0, 1, 4, [PCIE], comm=GIB),), (), (PCIE,))
    plan = plan_heuristic(inst, seed=0)
    p = plan.placements["train"]
    assert check_plan(inst, plan) == []
    assert p.per_machine() == {"pcie2-0": (2, (0, 1)), "pcie2-1": (2, (0, 1))}
    assert p.finish - p.start == pytest.approx(100.0 + 1.5 * GIB / 1.25e9)


def test_per_node_spreads_the_replicas() -> None:
    big = MachineClass("big", 4, 64, 512 * GIB, gpus=8, gpu_link="nvlink", nvlink_gpus=8)
    inst = Instance((gang_task("t", 10.0, 1, 4, [big], per_node=1),), (), (big,))
    plan = plan_heuristic(inst, seed=0)
    assert check_plan(inst, plan) == []
    assert len(plan.placements["t"].per_machine()) == 4


def test_a_gang_never_starts_partially_it_waits_until_every_replica_fits() -> None:
    # A 1-GPU job holds GPU 0 of one PCIe node for 50 s; a 4-replica gang needs all 4 GPUs of
    # the class, so it starts at 50, not earlier with 3 of its replicas.
    busy = Task("busy", (Option("default", "pcie2", 50.0, 1, GIB, 1),))
    inst = Instance((busy, gang_task("train", 10.0, 1, 4, [PCIE])), (), (PCIE,))
    plan = plan_heuristic(inst, seed=0)
    assert check_plan(inst, plan) == []
    assert plan.placements["train"].start == pytest.approx(50.0)


def test_check_plan_catches_a_partial_or_crowded_gang() -> None:
    inst = Instance((gang_task("t", 10.0, 1, 2, [PCIE], per_node=1),), (), (PCIE,))
    partial = Placement("t", "default", "pcie2-0", "pcie2", 0, 10.0, 4, 8 * GIB, (0,), (("pcie2-0", (0,)),))
    plan = Plan({"t": partial}, 10.0, 0.0, "hand")
    problems = check_plan(inst, plan)
    assert any("a gang of 2 replicas; its placement holds 1" in p for p in problems), problems
    crowded = Placement(
        "t", "default", "pcie2-0", "pcie2", 0, 10.0, 4, 8 * GIB, (0,), (("pcie2-0", (0,)), ("pcie2-0", (1,)))
    )
    problems = check_plan(inst, Plan({"t": crowded}, 10.0, 0.0, "hand"))
    assert any("puts 2 replicas on 'pcie2-0'; per_node allows 1" in p for p in problems), problems


def test_the_simulator_starts_a_gang_on_all_its_machines_at_once() -> None:
    busy = Task("busy", (Option("default", "pcie2", 50.0, 1, GIB, 2),))
    inst = Instance((busy, gang_task("train", 10.0, 1, 4, [PCIE])), (), (PCIE,))
    plan = plan_heuristic(inst, seed=0)
    sim = simulate(inst, plan, noise=0.5, seed=3)
    busy_end = sim.plan.placements["busy"].finish
    train = sim.plan.placements["train"]
    assert train.start == pytest.approx(busy_end)  # waited for the whole node, then all four at once
    assert len(train.ranks) == 4
    assert sim.utilization["pcie2"].gpu is not None and sim.utilization["pcie2"].gpu > 0


def test_the_simulator_starts_what_a_gang_uncovers_on_a_machine_it_swept_earlier() -> None:
    # c-0's queue is [gang, b] and c-1's [a, gang]: the gang can start only once a has
    # started on c-1, after c-0 was looked at; b must still start at 0 (as planned), not
    # when the next event comes.
    cls = MachineClass("c", 2, 8, 8 * GIB, gpus=2)
    one = (Option("default", "c", 100.0, 1, GIB, 1),)
    a, b = Task("a", one), Task("b", (Option("default", "c", 50.0, 1, GIB, 1),))
    g = Task("g", (Option("default", "c", 10.0, 1, GIB, 1),), replicas=2)
    inst = Instance((a, g, b), (), (cls,))
    placements = {
        "a": Placement("a", "default", "c-1", "c", 0.0, 100.0, 1, GIB, (0,)),
        "g": Placement("g", "default", "c-0", "c", 0.0, 10.0, 1, GIB, (0,), (("c-0", (0,)), ("c-1", (1,)))),
        "b": Placement("b", "default", "c-0", "c", 0.0, 50.0, 1, GIB, (1,)),
    }
    plan = Plan(placements, 100.0, plan_cost(inst, placements), "hand")
    assert check_plan(inst, plan) == []
    sim = simulate(inst, plan, noise=0.0)
    assert {n: p.start for n, p in sim.plan.placements.items()} == {"a": 0.0, "g": 0.0, "b": 0.0}


def test_build_rejects_classes_that_cannot_hold_the_gang_and_says_why() -> None:
    wf = load_steps(
        """
        train:
          image: x
          resources: {cpus: 2, memory: 1Gi, gpus: 2}
          gang: {replicas: 4, per_node: 1, gpu_link: nvlink, network: rdma}
        """
    ).workflow
    with pytest.raises(NoFitError) as info:
        build_instance(wf, [NV, PCIE], bandwidth=1.25e9)
    text = str(info.value)
    assert "4 replicas need 4 nodes of nv4 at 1 per node (per_node: 1), and it has 1" in text
    assert "gpu_link: nvlink, but the GPUs of pcie2 are not joined by NVLink" in text
    assert "network: rdma, but pcie2 nodes have no RDMA device" in text


def test_build_gives_the_task_its_gang() -> None:
    wf = load_steps(
        """
        train:
          image: x
          resources: {cpus: 2, memory: 1Gi, gpus: 1}
          gang: {replicas: 4, per_node: 2, comm: 1Gi}
        """
    ).workflow
    inst = build_instance(wf, [NV, PCIE], bandwidth=1.25e9)
    t = inst.task("train")
    assert (t.replicas, t.per_node, t.comm_bytes) == (4, 2, float(GIB))
    plan = plan_heuristic(inst, seed=0)
    assert check_plan(inst, plan) == []
    assert all(k <= 2 for k, _ in plan.placements["train"].per_machine().values())


def test_a_gang_plan_is_shown_and_stored_with_every_replica() -> None:
    from hetflow.plan.stored import plan_from_dict, plan_to_dict
    from hetflow.report.gantt import gantt_layout
    from hetflow.report.plan import plan_json, where

    inst = Instance((gang_task("train", 100.0, 1, 4, [PCIE], comm=GIB),), (), (PCIE,))
    plan = plan_heuristic(inst, seed=0)
    p = plan.placements["train"]
    assert where(p) == ("pcie2-0 x2, pcie2-1 x2", "0|1|0|1")
    (row,) = plan_json(plan, inst)["steps"]
    assert row["ranks"] == [{"node": m, "gpus": list(g)} for m, g in p.ranks]
    assert plan_from_dict(plan_to_dict(plan)) == plan  # ranks survive the run's stored plan
    bars = [b for b in gantt_layout(plan, inst).bars if b.placement.task == "train"]
    assert len(bars) == 4  # one in each GPU lane the gang holds, on both nodes


# --- the exact planner (CP-SAT) places gangs too ------------------------------------------

# Integer times: a 2-replica ring moves comm bytes once, 24e9 B at PCIe's 24 GB/s is 1 s on
# one node, 24 s over the instance's 1 GB/s network.
IB1 = 1e9


def _exact(inst: Instance) -> Plan:
    from hetflow.plan.search.exact import plan_exact

    plan = plan_exact(inst, time_limit=20, workers=1)
    assert check_plan(inst, plan) == []
    return plan


def test_exact_keeps_a_gang_on_one_node_when_the_others_fill_the_second() -> None:
    one = Task("one", (Option("default", "pcie2", 11.0, 1, GIB, 1),))
    two = Task("two", (Option("default", "pcie2", 11.0, 1, GIB, 1),))
    inst = Instance((gang_task("g", 10.0, 1, 2, [PCIE], comm=24e9), one, two), (), (PCIE,), bandwidth=IB1)
    plan = _exact(inst)
    assert plan.optimal and plan.makespan == pytest.approx(11.0)
    g = plan.placements["g"]
    assert len(g.per_machine()) == 1 and g.finish - g.start == pytest.approx(11.0)  # 10 s + 1 s over PCIe
    assert {plan.placements["one"].machine, plan.placements["two"].machine} != {g.machine}


def test_exact_spreads_a_gang_that_per_node_forbids_to_pack() -> None:
    one = Task("one", (Option("default", "pcie2", 30.0, 1, GIB, 1),))
    gang = gang_task("g", 10.0, 1, 2, [PCIE], comm=24e9, per_node=1)
    inst = Instance((gang, one), (), (PCIE,), bandwidth=IB1)
    plan = _exact(inst)
    g = plan.placements["g"]
    assert plan.optimal and plan.makespan == pytest.approx(34.0)  # 10 s + 24 s over the network
    assert g.per_machine() == {"pcie2-0": (1, g.ranks[0][1]), "pcie2-1": (1, g.ranks[1][1])}
    busy = plan.placements["one"]
    assert busy.gpus not in ([r[1] for r in g.ranks if r[0] == busy.machine])  # no GPU given twice


def test_exact_is_never_worse_than_the_list_planner_on_gangs() -> None:
    tasks = (
        gang_task("a", 100.0, 1, 4, [NV, PCIE], comm=10 * GIB),
        gang_task("b", 50.0, 1, 2, [NV, PCIE], comm=GIB),
        gang_task("c", 80.0, 2, 2, [NV, PCIE], per_node=1, comm=GIB),
        Task("d", (Option("default", "pcie2", 30.0, 1, GIB, 1),)),
    )
    from hetflow.plan.instance import Edge

    inst = Instance(tasks, (Edge("a", "d", 1e9), Edge("b", "c", 1e8)), (NV, PCIE))
    heuristic = plan_heuristic(inst, seed=0)
    plan = _exact(inst)
    assert plan.makespan <= heuristic.makespan + 1e-6
    for name in ("a", "b", "c"):
        task = next(t for t in tasks if t.name == name)
        assert len(plan.placements[name].ranks) == task.replicas


def test_a_gang_option_whose_class_is_too_small_is_left_out_with_its_reason() -> None:
    # 2 replicas at 1 per node need 2 machines; nv4 has one, so only pcie2 can hold it
    inst = Instance((gang_task("c", 80.0, 2, 2, [NV, PCIE], per_node=1),), (), (NV, PCIE))
    plan = plan_heuristic(inst, seed=0)
    assert plan.placements["c"].machine_class == "pcie2"
    with pytest.raises(NoFitError, match="need 2 machines, and the class has 1"):
        plan_heuristic(Instance((gang_task("c", 80.0, 2, 2, [NV], per_node=1),), (), (NV,)), seed=0)
