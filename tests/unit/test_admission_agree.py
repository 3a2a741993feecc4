"""The planner, the validator and the simulation admit the same things (issue 24: the GPU
share / MIG rule was written four times with different tolerances, so ``check_plan`` and
``simulate`` could disagree).

Each case is one machine with some steps already running from t=0 and one more step ``x``
that would start at t=0 beside them.  The planner is asked whether ``x`` can start at 0
(``MachineTimeline.earliest_start`` with the others held), the validator whether the plan
with ``x`` at 0 is valid (``check_plan``), and the simulation whether ``x`` starts at 0 when
the plan is replayed without noise (``simulate``); all three must give the table's answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hetflow.inventory import GpuSharing
from hetflow.plan.capacity import LOAD_TOL
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Plan, Task
from hetflow.plan.search.compiled import timeslice_runtime
from hetflow.plan.search.timeline import GpuSlot, MachineTimeline
from hetflow.plan.simulator import simulate
from hetflow.plan.validate import check_plan

GIB = 1 << 30
SOLO = 100.0


@dataclass(frozen=True)
class Step:
    """A step on the machine: its cores and memory, and a share (planned at ``level``), a
    MIG instance (``mig`` profile, held as ``device``), a whole GPU, or no GPU."""

    cores: float = 1.0
    memory: int = GIB
    share: float = 0.0
    level: float = 1.0
    mig: str = ""
    device: int | None = None
    whole: bool = False


@dataclass(frozen=True)
class Case:
    sharing: GpuSharing
    running: tuple[Step, ...]
    x: Step
    admits: bool
    cores: int = 8
    memory: int = 64 * GIB
    gpus: int = 1
    mig: tuple[str, ...] = ()


TS4 = GpuSharing(mode="time-slicing", replicas=4, slowdown=1.0)
TS2 = GpuSharing(mode="time-slicing", replicas=2, slowdown=1.0)
MPS4 = GpuSharing(mode="mps", replicas=4)
EXCL = GpuSharing()
Q = Step(share=0.25)
H = Step(share=0.5)

CASES = {
    # time-slicing: count within replicas, load within every tenant's planned load
    "ts-four-quarters-fill-a-gpu": Case(TS4, (Q, Q, Q), Q, True),
    "ts-fifth-tenant-over-replicas": Case(TS2, (Q, Q), Q, False),
    "ts-all-planned-at-1.5": Case(TS4, (Step(share=0.5, level=1.5),) * 2, Step(share=0.5, level=1.5), True),
    "ts-others-planned-at-1": Case(TS4, (H, H), Step(share=0.5, level=1.5), False),
    "ts-x-planned-at-1-others-at-1.5": Case(TS4, (Step(share=0.5, level=1.5),) * 2, H, False),
    "ts-load-a-hair-over-1-within-tolerance": Case(TS4, (H,), Step(share=0.5 + LOAD_TOL / 2), True),
    "ts-load-over-1-past-tolerance": Case(TS4, (H,), Step(share=0.5 + 2 * LOAD_TOL), False),
    # MPS: every client planned at 1, so the shares sum to at most 1
    "mps-shares-sum-to-1": Case(MPS4, (H, Q), Q, True),
    "mps-shares-past-1": Case(MPS4, (H, Q), Step(share=0.3), False),
    "mps-within-tolerance": Case(MPS4, (H,), Step(share=0.5 + LOAD_TOL / 2), True),
    "mps-past-tolerance": Case(MPS4, (H,), Step(share=0.5 + 2 * LOAD_TOL), False),
    # whole GPUs and tenants exclude each other
    "whole-gpu-beside-a-tenant": Case(TS4, (Q,), Step(whole=True), False),
    "tenant-beside-a-whole-gpu": Case(TS4, (Step(whole=True),), Q, False),
    "second-whole-gpu-free": Case(EXCL, (Step(whole=True),), Step(whole=True), True, gpus=2),
    "no-whole-gpu-free": Case(EXCL, (Step(whole=True),), Step(whole=True), False),
    # MIG: an instance is a device of its own
    "mig-second-1g-instance-free": Case(
        EXCL, (Step(mig="1g.10gb", device=0),), Step(mig="1g.10gb", device=1), True, mig=("1g.10gb", "1g.10gb")
    ),
    "mig-only-1g-instance-held": Case(
        EXCL, (Step(mig="1g.10gb", device=1),), Step(mig="1g.10gb", device=1), False, mig=("3g.40gb", "1g.10gb")
    ),
    # cores within rounding, memory to the byte
    "cores-sum-to-capacity-with-rounding": Case(
        EXCL, (Step(cores=0.1), Step(cores=0.2)), Step(cores=7.7), True, gpus=0
    ),
    "cores-over-capacity": Case(EXCL, (Step(cores=4.0),), Step(cores=4.001), False, gpus=0),
    "memory-to-the-byte": Case(EXCL, (Step(memory=40 * GIB),), Step(memory=24 * GIB), True, gpus=0),
    "memory-one-byte-over": Case(EXCL, (Step(memory=40 * GIB),), Step(memory=24 * GIB + 1), False, gpus=0),
}


def _option(s: Step) -> Option:
    gpus = 1 if (s.share or s.mig or s.whole) else 0
    return Option("v", "m", SOLO, s.cores, s.memory, gpus, share=s.share, mig=s.mig)


def _runtime(case: Case, s: Step) -> float:
    if s.share and case.sharing.mode == "time-slicing":
        return timeslice_runtime(SOLO, s.level, case.sharing.resolved_slowdown)
    return SOLO


def _slot(case: Case, s: Step) -> GpuSlot | None:
    if s.mig:
        return GpuSlot(mig=s.mig)
    if s.share:
        return GpuSlot(share=s.share, level=s.level, replicas=case.sharing.replicas)
    return None


def _setup(case: Case) -> tuple[Instance, Plan, MachineClass]:
    cls = MachineClass(
        "m", 1, case.cores, case.memory, gpus=case.gpus, gpu_model="A100", gpu_sharing=case.sharing, mig=case.mig
    )
    steps = {**{f"a{i}": s for i, s in enumerate(case.running)}, "x": case.x}
    tasks = tuple(Task(name, (_option(s),)) for name, s in steps.items())
    instance = Instance(tasks, (), (cls,))
    placements: dict[str, Placement] = {}
    whole = 0  # whole GPUs are given lowest first, again from 0 once all are given (a clash)
    for name, s in steps.items():
        gpus = (whole % case.gpus,) if s.whole else (0,) if (s.share or s.mig) else ()
        whole += s.whole
        placements[name] = Placement(
            name, "v", "m-0", "m", 0.0, _runtime(case, s), s.cores, s.memory, gpus, share=s.share, mig_device=s.device
        )
    makespan = max(p.finish for p in placements.values())
    return instance, Plan(placements, makespan, plan_cost(instance, placements), "table"), cls


def _planner_admits(case: Case, instance: Instance) -> bool:
    line = MachineTimeline(case.cores, case.memory, case.gpus, [case.mig] * case.gpus if case.mig else ())
    for t in instance.tasks:
        if t.name == "x":
            continue
        s = case.running[int(t.name[1:])]
        slot = _slot(case, s)
        if slot is not None:
            line.reserve_slot(0.0, _runtime(case, s), s.cores, s.memory, slot)
        else:
            line.reserve(0.0, _runtime(case, s), s.cores, s.memory, 1 if s.whole else 0)
    x = case.x
    gpus = 1 if (x.share or x.mig or x.whole) else 0
    return line.earliest_start(0.0, _runtime(case, x), x.cores, x.memory, gpus, slot=_slot(case, x)) == 0.0


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_planner_validator_and_simulation_agree_on_admission(case: Case) -> None:
    instance, plan, _ = _setup(case)
    validator = check_plan(instance, plan) == []
    simulated = simulate(instance, plan, noise=0.0).plan.placements["x"].start == 0.0
    planner = _planner_admits(case, instance)
    assert (planner, validator, simulated) == (case.admits,) * 3, check_plan(instance, plan)
