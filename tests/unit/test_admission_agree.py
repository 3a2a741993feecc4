"""Every caller of the capacity predicate admits the same things (issue 24: the GPU share /
MIG rule was written four times with different tolerances; issue 39: one ``fits`` for all).

Each row is one node with some steps already running from t=0 and one more step ``x``
that would start at t=0 beside them, and the reasons ``x`` does not fit (none: it fits).
Every caller that can state the row answers it from its own model:

- ``fits``: the predicate itself, on the row as a ``NodeState`` and a ``Demand``, must give
  exactly the row's reasons;
- ``timeline``: the planner, ``MachineTimeline.earliest_start`` with the others held, is 0;
- ``check_plan``: the plan with ``x`` at 0 is valid;
- ``simulate``: ``x`` starts at 0 when the plan is replayed without noise;
- ``baselines``: ``model.Machine`` (first fit, kube-scheduler, backfill) with the others taken;
- ``leases``: the local runner's ``tenancy.admits`` over the GPU's live leases;
- ``kubernetes``: the Kubernetes admission places ``x``'s pod on the node's room.

A caller that cannot state a row is left out of it, for the reason ``not_stated`` gives;
one known difference is kept, by name, as a strict xfail (``KNOWN``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from hetflow.execute.backends.kubernetes.admission import place
from hetflow.inventory import GpuSharing
from hetflow.plan.checking.simulator import simulate
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Plan, Task
from hetflow.plan.model.fit import (
    CORES,
    HELD,
    INSTANCE,
    LOAD,
    LOAD_TOL,
    MEMORY,
    MIG,
    MIG_MODE,
    MODE,
    REPLICAS,
    TENANTS,
    WHOLE,
    Claim,
    Demand,
    GpuState,
    NodeState,
    fits,
)
from hetflow.plan.model.machine import Machine
from hetflow.plan.search.compiled import timeslice_runtime
from hetflow.plan.search.timeline import GpuSlot, MachineTimeline
from hetflow.plan.sharing.tenancy import Tenant, admits

GIB = 1 << 30
SOLO = 100.0
DRA = "dra/gpu.nvidia.com"  # a named scalar, as the Kubernetes admission keys DRA devices


@dataclass(frozen=True)
class Step:
    """A step on the node: its cores and memory, and a share (planned at ``level``; held in
    ``mode``, the node's by default), a MIG instance (``mig`` profile, held as ``device``),
    a whole GPU, or no GPU; ``scalars``: named resources it asks for."""

    cores: float = 1.0
    memory: int = GIB
    share: float = 0.0
    level: float = 1.0
    mode: str = ""
    mig: str = ""
    device: int | None = None
    whole: bool = False
    scalars: tuple[tuple[str, float], ...] = ()

    @property
    def gpu(self) -> bool:
        return bool(self.share or self.mig or self.whole)


@dataclass(frozen=True)
class Case:
    sharing: GpuSharing
    running: tuple[Step, ...]
    x: Step
    why: tuple[str, ...]  # the reasons x does not fit: () it fits
    cores: int = 8
    memory: int = 64 * GIB
    gpus: int = 1
    mig: tuple[str, ...] = ()  # every GPU's MIG layout (): out of MIG mode
    scalars: tuple[tuple[str, float], ...] = ()
    only: str = ""  # the one caller (beside fits) that can state it


TS4 = GpuSharing(mode="time-slicing", replicas=4, slowdown=1.0)
TS2 = GpuSharing(mode="time-slicing", replicas=2, slowdown=1.0)
MPS4 = GpuSharing(mode="mps", replicas=4)
EXCL = GpuSharing()
Q = Step(share=0.25)
H = Step(share=0.5)
WHOLE_GPU = Step(whole=True)
MIG_LAYOUT = ("1g.10gb", "1g.10gb")
ONE_DRA = Step(scalars=((DRA, 1.0),))

CASES = {
    # time-slicing: count within replicas, load within every tenant's planned load
    "ts-four-quarters-fill-a-gpu": Case(TS4, (Q, Q, Q), Q, ()),
    "ts-fifth-tenant-over-replicas": Case(TS2, (Q, Q), Q, (REPLICAS,)),
    "ts-all-planned-at-1.5": Case(TS4, (Step(share=0.5, level=1.5),) * 2, Step(share=0.5, level=1.5), ()),
    "ts-others-planned-at-1": Case(TS4, (H, H), Step(share=0.5, level=1.5), (LOAD,)),
    "ts-x-planned-at-1-others-at-1.5": Case(TS4, (Step(share=0.5, level=1.5),) * 2, H, (LOAD,)),
    "ts-load-a-hair-over-1-within-tolerance": Case(TS4, (H,), Step(share=0.5 + LOAD_TOL / 2), ()),
    "ts-load-over-1-past-tolerance": Case(TS4, (H,), Step(share=0.5 + 2 * LOAD_TOL), (LOAD,)),
    # MPS: every client planned at 1, so the shares sum to at most 1
    "mps-shares-sum-to-1": Case(MPS4, (H, Q), Q, ()),
    "mps-shares-past-1": Case(MPS4, (H, Q), Step(share=0.3), (LOAD,)),
    "mps-within-tolerance": Case(MPS4, (H,), Step(share=0.5 + LOAD_TOL / 2), ()),
    "mps-past-tolerance": Case(MPS4, (H,), Step(share=0.5 + 2 * LOAD_TOL), (LOAD,)),
    # whole GPUs and tenants exclude each other
    "whole-gpu-beside-a-tenant": Case(TS4, (Q,), WHOLE_GPU, (TENANTS,)),
    "tenant-beside-a-whole-gpu": Case(TS4, (WHOLE_GPU,), Q, (HELD,)),
    "second-whole-gpu-free": Case(EXCL, (WHOLE_GPU,), WHOLE_GPU, (), gpus=2),
    "no-whole-gpu-free": Case(EXCL, (WHOLE_GPU,), WHOLE_GPU, (HELD,)),
    # MIG: an instance is a device of its own; a GPU in MIG mode is given only by instance
    "mig-second-1g-instance-free": Case(
        EXCL, (Step(mig="1g.10gb", device=0),), Step(mig="1g.10gb", device=1), (), mig=MIG_LAYOUT
    ),
    "mig-only-1g-instance-held": Case(
        EXCL, (Step(mig="1g.10gb", device=1),), Step(mig="1g.10gb", device=1), (INSTANCE,), mig=("3g.40gb", "1g.10gb")
    ),
    "whole-gpu-on-a-gpu-in-mig-mode": Case(EXCL, (), WHOLE_GPU, (MIG_MODE,), mig=MIG_LAYOUT),
    "share-on-a-gpu-in-mig-mode": Case(TS4, (), Q, (MIG_MODE,), mig=MIG_LAYOUT),
    # cores within rounding, memory to the byte
    "cores-sum-to-capacity-with-rounding": Case(EXCL, (Step(cores=0.1), Step(cores=0.2)), Step(cores=7.7), (), gpus=0),
    "cores-over-capacity": Case(EXCL, (Step(cores=4.0),), Step(cores=4.001), (CORES,), gpus=0),
    "memory-to-the-byte": Case(EXCL, (Step(memory=40 * GIB),), Step(memory=24 * GIB), (), gpus=0),
    "memory-one-byte-over": Case(EXCL, (Step(memory=40 * GIB),), Step(memory=24 * GIB + 1), (MEMORY,), gpus=0),
    "cores-and-memory-both-short": Case(EXCL, (Step(cores=6.0, memory=60 * GIB),), Step(3.0, 8 * GIB), (CORES, MEMORY)),
    # one GPU held two ways: only the local leases see a GPU's tenants in several modes
    "ts-lease-beside-mps-tenants": Case(TS4, (Step(share=0.25, mode="mps"),), Q, (MODE,), only="leases"),
    "mig-lease-on-a-shared-gpu": Case(TS4, (Q,), Step(mig="1g.10gb", device=0), (MODE,), only="leases"),
    "mig-lease-on-a-gpu-held-whole": Case(TS4, (WHOLE_GPU,), Step(mig="1g.10gb", device=0), (HELD,), only="leases"),
    # named scalars: only the Kubernetes admission counts them (here, DRA devices)
    "dra-device-free": Case(EXCL, (ONE_DRA,), ONE_DRA, (), gpus=0, scalars=((DRA, 2.0),), only="kubernetes"),
    "dra-devices-all-held": Case(
        EXCL, (ONE_DRA, ONE_DRA), ONE_DRA, (DRA,), gpus=0, scalars=((DRA, 2.0),), only="kubernetes"
    ),
}

# The difference the core found and this pass keeps (behaviour does not change): check_plan does
# not hold a whole GPU to MIG mode.  The exact planner gives GPUs by count and then by index
# (search.gpuindex), MIG ones included, so holding it would refuse plans it makes today.
KNOWN = {("whole-gpu-on-a-gpu-in-mig-mode", "check_plan"): "check_plan does not hold a whole GPU to MIG mode"}


def not_stated(case: Case, caller: str) -> str | None:
    """Why ``caller`` cannot state ``case`` (None: it can)."""
    x_and_running = (case.x, *case.running)
    if caller == "fits":
        return None
    if case.only:
        return None if caller == case.only else f"only {case.only} can state it"
    if caller == "simulate" and MIG_MODE in case.why:
        return "the replay holds a plan's GPUs as planned; their modes are check_plan's to judge"
    if caller in ("baselines", "kubernetes") and (case.mig or any(s.share or s.mig for s in x_and_running)):
        return "it counts whole GPUs (MIG ones too), and holds no shares or MIG instances"
    if caller == "leases" and (not case.x.gpu or CORES in case.why or MEMORY in case.why):
        return "the leases hold GPUs only; cores and memory are the local capacity's (plan.filters)"
    if caller == "leases" and case.sharing.mode == "time-slicing" and LOAD in case.why:
        return "a live time-sliced lease is not planned at a load: only its count binds"
    if caller == "leases" and MIG_MODE in case.why:
        return "the leases do not know a GPU's mode; the chooser never offers a GPU in MIG mode whole or shared"
    return None


# --- each caller, from the row --------------------------------------------------------------


def _whole_index(case: Case) -> list[int | None]:
    """The GPU each step holds whole (running steps first, then x), lowest first, again from
    0 once all are given (a clash)."""
    out: list[int | None] = []
    given = 0
    for s in (*case.running, case.x):
        out.append(given % case.gpus if s.whole else None)
        given += s.whole
    return out


def _claim(case: Case, s: Step, whole: int | None) -> Claim:
    if s.mig:
        return Claim(0, MIG, instance=s.device)
    if s.share:
        return Claim(0, s.mode or case.sharing.mode, s.share, s.level)
    return Claim(whole)


def _fits(case: Case) -> tuple[str, ...]:
    gpus = _whole_index(case)
    state = {
        g: GpuState(
            whole=sum(1 for w in gpus[:-1] if w == g),
            tenants=sum(1 for s in case.running if s.share and g == 0),
            load=sum(s.share for s in case.running if g == 0),
            low=min((s.level for s in case.running if s.share and g == 0), default=math.inf),
            modes=frozenset(s.mode or case.sharing.mode for s in case.running if s.share and g == 0),
            instances=frozenset(s.device for s in case.running if s.mig and g == 0),
            mig_mode=bool(case.mig),
        )
        for g in range(case.gpus)
    }
    used: dict[str, float] = {}
    for s in case.running:
        for k, v in s.scalars:
            used[k] = used.get(k, 0.0) + v
    node = NodeState(
        case.cores,
        case.memory,
        case.gpus,
        sum(s.cores for s in case.running),
        sum(s.memory for s in case.running),
        replicas=case.sharing.replicas,
        gpu=state,
        scalars=dict(case.scalars),
        used_scalars=used,
    )
    x = case.x
    claims = (_claim(case, x, gpus[-1]),) if x.gpu else ()
    return fits(node, Demand(x.cores, x.memory, claims=claims, scalars=x.scalars))


def _option(s: Step) -> Option:
    return Option("v", "m", SOLO, s.cores, s.memory, int(s.gpu), share=s.share, mig=s.mig)


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


def _setup(case: Case) -> tuple[Instance, Plan]:
    cls = MachineClass(
        "m", 1, case.cores, case.memory, gpus=case.gpus, gpu_model="A100", gpu_sharing=case.sharing, mig=case.mig
    )
    steps = {**{f"a{i}": s for i, s in enumerate(case.running)}, "x": case.x}
    tasks = tuple(Task(name, (_option(s),)) for name, s in steps.items())
    instance = Instance(tasks, (), (cls,))
    placements: dict[str, Placement] = {}
    for (name, s), w in zip(steps.items(), _whole_index(case), strict=True):
        gpus = (w,) if w is not None else (0,) if s.gpu else ()
        placements[name] = Placement(
            name, "v", "m-0", "m", 0.0, _runtime(case, s), s.cores, s.memory, gpus, share=s.share, mig_device=s.device
        )
    makespan = max(p.finish for p in placements.values())
    return instance, Plan(placements, makespan, plan_cost(instance, placements), "table")


def _timeline(case: Case) -> bool:
    line = MachineTimeline(case.cores, case.memory, case.gpus, [case.mig] * case.gpus if case.mig else ())
    for s in case.running:
        slot = _slot(case, s)
        if slot is not None:
            line.reserve_slot(0.0, _runtime(case, s), s.cores, s.memory, slot)
        else:
            line.reserve(0.0, _runtime(case, s), s.cores, s.memory, 1 if s.whole else 0)
    x = case.x
    return line.earliest_start(0.0, _runtime(case, x), x.cores, x.memory, int(x.gpu), slot=_slot(case, x)) == 0.0


def _check_plan(case: Case) -> bool:
    return check_plan(*_setup(case)) == []


def _simulate(case: Case) -> bool:
    return simulate(*_setup(case), noise=0.0).plan.placements["x"].start == 0.0


def _baselines(case: Case) -> bool:
    cls = MachineClass("m", 1, case.cores, case.memory, gpus=case.gpus)
    node = Machine.idle(0, "m-0", cls, one_task=False)
    for s in case.running:
        node.take(Demand(s.cores, s.memory, int(s.whole)))
    return node.fits(Demand(case.x.cores, case.x.memory, int(case.x.whole)))


def _tenant(case: Case, s: Step, whole: int | None) -> Tenant:
    if s.mig:
        return Tenant("GPU-0", MIG, mig=f"MIG-{s.device}")
    if s.share:
        return Tenant("GPU-0", s.mode or case.sharing.mode, s.share)
    return Tenant(f"GPU-{whole}", WHOLE)


def _leases(case: Case) -> bool:
    gpus = _whole_index(case)
    others = [_tenant(case, s, w) for s, w in zip(case.running, gpus, strict=False)]
    return admits(_tenant(case, case.x, gpus[-1]), others, case.sharing) is None


def _kubernetes(case: Case) -> bool:
    def requests(s: Step) -> dict[str, float]:
        return {"cpu": s.cores, "memory": float(s.memory), "nvidia.com/gpu": float(s.whole), **dict(s.scalars)}

    free = {"cpu": float(case.cores), "memory": float(case.memory), "nvidia.com/gpu": float(case.gpus)}
    free |= dict(case.scalars)
    for s in case.running:
        for k, v in requests(s).items():
            free[k] = free.get(k, 0.0) - v
    need = {k: v for k, v in requests(case.x).items() if v}
    return place({"m-0": free}, need, ()) is not None


CALLERS = {
    "timeline": _timeline,
    "check_plan": _check_plan,
    "simulate": _simulate,
    "baselines": _baselines,
    "leases": _leases,
    "kubernetes": _kubernetes,
}


def _rows() -> list[Any]:
    rows = []
    for name, case in CASES.items():
        for caller in CALLERS:
            if not_stated(case, caller) is None:
                known = KNOWN.get((name, caller))
                marks = [pytest.mark.xfail(strict=True, reason=known)] if known else []
                rows.append(pytest.param(case, caller, id=f"{name}/{caller}", marks=marks))
    return rows


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fits_gives_each_rows_reasons(case: Case) -> None:
    assert _fits(case) == case.why


@pytest.mark.parametrize(("case", "caller"), _rows())
def test_every_caller_admits_what_fits_admits(case: Case, caller: str) -> None:
    answer = CALLERS[caller](case)
    assert answer == (not case.why), check_plan(*_setup(case)) if caller == "check_plan" else caller


def test_every_caller_states_rows_that_fit_and_rows_that_do_not() -> None:
    """No caller is left out of the table, nor answers only one way."""
    for caller in CALLERS:
        verdicts = {not c.why for c in CASES.values() if not_stated(c, caller) is None}
        assert verdicts == {True, False}, caller
