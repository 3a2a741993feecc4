"""Why a ``gpu_share`` step ran shared or on a whole GPU, for ``hetflow plan --explain``.

The planner gives a share step two options on a node that shares its GPUs: a share (at a
planned load; time-slicing slows it by ``1 + s x max(0, load - 1)``, MPS does not) and a
whole GPU (its solo time, but the GPU is held alone).  The answer is counterfactual: every
other step is kept where the plan put it, and the step's other kind is placed at its
earliest finish on its class (after its inputs arrive); the verdict compares finish times
and says the load and slowdown behind the choice.
"""

from __future__ import annotations

import math

from hetflow.plan.instance import Instance, Option, Placement, Plan
from hetflow.plan.search.compiled import Choice, Compiled
from hetflow.plan.search.timeline import GpuSlot, MachineTimeline
from hetflow.plan.sharing.sharecheck import planned_load


def _same_kind(o: Option, p: Placement) -> bool:
    return (o.share > 0) == (p.share > 0) and bool(o.mig) == (p.mig_device is not None)


def _choice_of(problem: Compiled, t: int, p: Placement) -> Choice | None:
    task = problem.instance.tasks[t]
    took = p.finish - p.start
    found = [
        ch
        for ch in problem.choices[t]
        if task.options[ch.index].variant == p.variant
        and task.options[ch.index].machine_class == p.machine_class
        and _same_kind(task.options[ch.index], p)
    ]
    return min(found, key=lambda ch: abs(ch.runtime - took), default=None)


def _others_held(problem: Compiled, plan: Plan, step: str) -> list[MachineTimeline]:
    tls = problem.timelines()
    where = {name: i for i, name in enumerate(problem.machine_name)}
    for t, name in enumerate(problem.names):
        p = plan.placements.get(name)
        if name == step or p is None:
            continue
        ch = _choice_of(problem, t, p)
        slot = ch.slot if ch is not None else None
        for machine, (k, gpus) in p.per_machine().items():
            if machine in where:
                tls[where[machine]].hold(p.start, p.finish, p.cores * k, p.memory * k, gpus, slot, p.mig_device)
    return tls


def alternative_finish(plan: Plan, instance: Instance, step: str, option: Option) -> tuple[float, GpuSlot | None]:
    """The earliest finish of ``step`` run as ``option`` with every other step where the
    plan put it (inf when it never fits), and the slot it would take."""
    problem = Compiled(instance)
    t = problem.names.index(step)
    tls = _others_held(problem, plan, step)
    k = instance.tasks[t].options.index(option)
    best, slot = math.inf, None
    for ch in problem.choices[t]:
        if ch.index != k:
            continue
        for m in range(problem.first[ch.cls], problem.first[ch.cls] + problem.count[ch.cls]):
            ready = 0.0
            for parent, comm in problem.parents[t]:
                pp = plan.placements[problem.names[parent]]
                ready = max(ready, pp.finish + (0.0 if pp.machine == problem.machine_name[m] else comm))
            s = tls[m].earliest_start(ready, ch.runtime, ch.cores, ch.memory, ch.gpus, slot=ch.slot)
            if s + ch.runtime < best:
                best, slot = s + ch.runtime, ch.slot
    return best, slot


def load_of(plan: Plan, p: Placement) -> float:
    """The most load on ``p``'s GPU during its run: the shares of the tenants there then."""
    if p.share <= 0 or not p.gpus:
        return 1.0
    others = [
        q
        for q in plan.placements.values()
        if q.machine == p.machine and q.share > 0 and q.gpus[:1] == p.gpus[:1] and q.task != p.task
    ]
    starts = sorted({p.start, *(q.start for q in others if p.start < q.start < p.finish)})
    return max(p.share + sum(q.share for q in others if q.start <= x < q.finish) for x in starts)


def share_reason(plan: Plan, instance: Instance, step: str, other: Option) -> str:
    """Why ``other`` (the step's share or whole-GPU option on the chosen class) lost."""
    chosen = plan.placements[step]
    cls = instance.machine_class(chosen.machine_class)
    finish, slot = alternative_finish(plan, instance, step, other)
    alt = "never fits with the other steps where they are" if finish == math.inf else f"finishes {finish:.4g}s"
    sharing = cls.gpu_sharing
    if chosen.share > 0:
        mine = next(o for o in instance.task(step).options if _same_kind(o, chosen) and o.variant == chosen.variant)
        load, took = load_of(plan, chosen), chosen.finish - chosen.start
        factor = took / mine.runtime if mine.runtime > 0 else 1.0
        s = sharing.resolved_slowdown
        slow = "no slowdown" if factor <= 1 + 1e-9 else f"{factor:.3g}x slower than alone, s={s:g}"
        return (
            f"whole GPU lost: {alt} vs {chosen.finish:.4g}s shared ({sharing.describe()}, "
            f"load {load:.3g}, planned at {planned_load(chosen, mine, cls):.3g}, {slow})"
        )
    level = slot.level if slot is not None else 1.0
    slow = "" if level <= 1 else f", slowed {1 + sharing.resolved_slowdown * (level - 1):.3g}x at load {level:g}"
    return f"shared lost: {alt} ({sharing.describe()}{slow}) vs {chosen.finish:.4g}s on a whole GPU"
