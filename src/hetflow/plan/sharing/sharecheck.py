"""``check_plan``'s rules for slices of GPUs (shared tenants and MIG instances).

The slowdown model the planner plans with, and this module checks (``compiled.gpu_slots``):

- **time-slicing**: a GPU's *load* at an instant is the sum of the shares of the tenants
  on it then.  A tenant planned at load ``L`` runs ``solo x (1 + s x max(0, L - 1))``
  (``s`` = the node's ``sharing.resolved_slowdown``, default 0.966: the seed's two
  containers sharing one GPU ran 28.7 s each against 14.6 s alone, at load 2).  A plan is
  valid only if the load over each tenant's run never exceeds the load its run time was
  planned at, and at most ``replicas`` tenants share a GPU at once.
- **MPS**: each client is held to its share of the SMs, so the shares on a GPU sum to at
  most 1, at most ``replicas`` clients, and a client runs its solo time (no slowdown).
- **MIG**: an instance is an exclusive device of its profile: two steps never hold one
  instance at once, and its index must name an instance of the step's profile.

Whole-GPU placements never overlap a tenant on the same GPU.  Whether one GPU may hold its
tenants (a GPU in MIG mode never; beside a whole holder never; their count and load) is
``model.gpu_refusals``, asked at every instant with the instant's last tenant as the one
joining the others.  That a share needs a node that shares its GPUs, and a MIG instance
an instance of its profile, is the option's fit to its class, checked here.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping

from hetflow.plan.instance import MachineClass, Option, Placement
from hetflow.plan.model.fit import HELD, LOAD, MIG_MODE, REPLICAS, Claim, GpuState, gpu_refusals, sharing_refusal

_REL = 1e-9


def planned_load(p: Placement, option: Option, cls: MachineClass) -> float:
    """The load a time-sliced tenant's run time was planned at (from its run time): MPS
    tenants, and any tenant when the slowdown is 0, are planned at 1 (resp. any load)."""
    s = cls.gpu_sharing.resolved_slowdown
    if cls.gpu_sharing.mode != "time-slicing":
        return 1.0
    if s <= 0:
        return float(cls.gpu_sharing.replicas)
    solo = option.runtime
    return 1.0 + max(0.0, (p.finish - p.start) / solo - 1.0) / s if solo > 0 else 1.0


def runtime_problem(p: Placement, option: Option, cls: MachineClass) -> str | None:
    """Why a shared tenant's run time is not one the model allows, or None."""
    took = p.finish - p.start
    if took < option.runtime * (1 - _REL) - _REL:
        return (
            f"task {p.task!r} runs {took:g} s shared; alone it takes {option.runtime:g} s, "
            "and sharing never speeds a step up"
        )
    if cls.gpu_sharing.mode == "mps" and abs(took - option.runtime) > _REL * max(1.0, took):
        return f"task {p.task!r} runs {took:g} s as an MPS client; its option takes {option.runtime:g} s (no slowdown)"
    return None


def check_slices(
    machine: str,
    cls: MachineClass,
    items: list[Placement],
    options: Mapping[str, Option],
    problems: list[str],
) -> None:
    """Shared tenants and MIG instances of ``machine``'s placements ``items``."""
    by_gpu: dict[int, list[Placement]] = defaultdict(list)
    by_mig: dict[tuple[int, int], list[Placement]] = defaultdict(list)
    for p in items:
        if not p.gpus:
            continue
        if p.mig_device is not None:
            layout = cls.gpu_kind(p.gpus[0]).mig if p.gpus[0] < cls.gpus else ()
            want = options[p.task].mig if p.task in options else ""
            if p.mig_device >= len(layout) or layout[p.mig_device] != want:
                have = layout[p.mig_device] if p.mig_device < len(layout) else "none"
                problems.append(
                    f"task {p.task!r} holds MIG instance {p.mig_device} of GPU {p.gpus[0]} on {machine!r} "
                    f"({have}); it asks for a {want or 'whole GPU'}"
                )
            by_mig[(p.gpus[0], p.mig_device)].append(p)
        else:
            for g in set(p.gpus):
                by_gpu[g].append(p)
    for (g, d), users in sorted(by_mig.items()):
        users.sort(key=lambda p: p.start)
        for a, b in itertools.pairwise(users):
            if b.start < a.finish - _REL * max(1.0, a.finish):
                problems.append(
                    f"MIG instance {d} of GPU {g} on {machine!r} is given to {a.task!r} and {b.task!r} at once"
                )
    for g, users in sorted(by_gpu.items()):
        _check_gpu(machine, cls, g, users, options, problems)


def _check_gpu(
    machine: str, cls: MachineClass, g: int, users: list[Placement], options: Mapping[str, Option], problems: list[str]
) -> None:
    """At every instant one GPU holds whole placements alone, or tenants within the policy."""
    shared = [p for p in users if p.share > 0]
    if not shared:
        return  # whole placements only: validate's index check covers them
    sharing = cls.gpu_sharing
    first = Claim(g, sharing.mode, shared[0].share)
    if MIG_MODE in gpu_refusals(GpuState(mig_mode=bool(cls.gpu_kind(g).mig)), first, 1):
        problems.append(f"GPU {g} of {machine!r} is in MIG mode; {shared[0].task!r} cannot share it")
    if not cls.gpu_sharing.shared:
        problems.append(f"GPU {g} of {machine!r} is exclusive; {shared[0].task!r} cannot hold a share of it")
        return
    level = {p.task: planned_load(p, options[p.task], cls) if p.task in options else 1.0 for p in shared}
    instants = sorted({p.start for p in users})
    reported: set[tuple[str, ...]] = set()
    for x in instants:
        here = [p for p in users if p.start <= x < p.finish - _REL * max(1.0, p.finish)]
        whole = [p for p in here if p.share == 0]
        tenants = [p for p in here if p.share > 0]
        names = tuple(sorted(p.task for p in here))
        if not tenants or names in reported:
            continue
        why = ""
        load = sum(p.share for p in tenants)
        refused = _refusals(g, tenants, len(whole), level, sharing.mode, sharing.replicas)
        if HELD in refused:
            why = f"{whole[0].task!r} holds it whole"
        elif REPLICAS in refused:
            why = f"{len(tenants)} tenants, {sharing.describe()} allows {sharing.replicas}"
        elif LOAD in refused and sharing.mode == "mps":
            why = f"MPS shares sum to {load:g} > 1"
        elif LOAD in refused:
            slowed = [p.task for p in tenants if sharing_refusal(1, load, level[p.task], 1) is not None]
            why = f"load {load:g} slows {', '.join(map(repr, slowed))} beyond the load its run time was planned at"
        if why:
            reported.add(names)
            problems.append(f"GPU {g} of {machine!r} at t={x:g} is over its sharing ({', '.join(names)}): {why}")


def _refusals(
    g: int, tenants: list[Placement], whole: int, level: Mapping[str, float], mode: str, replicas: int
) -> tuple[str, ...]:
    """``gpu_refusals`` of one instant: the last of ``tenants`` joining the others on GPU
    ``g``, which ``whole`` placements hold (the load summed in the tenants' order)."""
    *others, last = tenants
    state = GpuState(
        whole,
        len(others),
        sum(p.share for p in others),
        min((level[p.task] for p in others), default=math.inf),
        frozenset((mode,)) if others else frozenset(),
    )
    return gpu_refusals(state, Claim(g, mode, last.share, level[last.task]), replicas)
