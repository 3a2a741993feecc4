"""A lower bound on any plan's makespan, as shared/bench/README.md defines it ("Lower bound"),
with a GPU term beside it.

    LB = max(critical path, total work / total capacity, GPU work / GPU capacity)

* Critical path: the longest chain of the DAG with every task at its fastest option (its
  fastest variant on its fastest class) and communication free.
* Work: every task's smallest core-seconds, counted at speed 1.0 (an option's run time x
  its cores x its class's speed, so a task does the same work on a fast or a slow node),
  divided by the cluster's total core-speed (the sum over machines of cores x speed).  In
  the one-task-per-machine model a task takes a whole machine, so cores count as 1.

* GPU work: a task none of whose options runs without a GPU holds, on whichever option it
  takes, ``gpus x runtime`` GPU-seconds; weighted by its class's ``gpu_speed`` (so an A100
  second counts for more than a T4 second) the least of those over its options is work no
  schedule avoids.  Their total over the cluster's weighted GPUs (the sum over machines of
  GPUs x gpu_speed) bounds the makespan.  A task with a CPU option counts 0: it could run
  on the CPUs, so counting it would not be a bound (the work term already counts its cores).

All are valid bounds: no task finishes before its chain of predecessors, and no schedule
does more core-seconds (or weighted GPU-seconds) per second than the cluster has.  Any
positive weights would keep the GPU term valid; the GPU speed is what makes it tight.

``lower_bound(instance, strong=True)`` adds two terms that see more:

* the LP of ``plan.bounds.lpbound`` (chains and per-class capacities in one model, tasks split
  fractionally over their options), when OR-tools is installed and the instance is not too
  big for it (``LP_LIMIT`` task options);
* option pruning by a guess ``G``: an option with ``head + runtime + tail > G`` (``head``
  the fastest chain before the task, ``tail`` the fastest one after it) cannot be in a plan
  of makespan ``<= G``.  A bound computed over the options left, ``B(G)``, is therefore a
  bound on any plan of makespan ``<= G``, and every plan satisfies
  ``makespan >= min(G, B(G))`` for every ``G``.  ``B`` falls as ``G`` grows, so bisection
  finds the ``G`` where the two cross.  ``B`` is the closed-form terms above (cheap, any
  size), or the LP when it is affordable.  This is what sees that a GPU step whose CPU
  variant takes longer than the plan cannot leave the GPU pool: the fractional LP alone
  lets it run 80 % on a GPU and 20 % on a CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hetflow.plan.bounds.lpbound import lp_solution
from hetflow.plan.instance import Instance, Option

LP_LIMIT = 15_000  # task options above which the pruned LP search is skipped (GLOP: ~1 s per 5,000)
# Bisection: at most this many steps, stopping once hi - lo is within the tolerance of hi;
# the closed-form terms are cheap (finer), an LP is a solve each (coarser).
_CLOSED_FORM_SEARCH = (24, 1e-5)
_LP_SEARCH = (12, 3e-3)
_ROUND_TESTS = 24  # run-time thresholds tried by the GPU-rounds test (each costs a sort)


def critical_path(instance: Instance) -> float:
    """The longest chain with each task at its fastest option, communication free."""
    fastest = {t.name: min(o.runtime for o in t.options) for t in instance.tasks}
    parents: dict[str, list[str]] = {t.name: [] for t in instance.tasks}
    for e in instance.edges:
        parents[e.child].append(e.parent)
    finish: dict[str, float] = {}
    for t in instance.tasks:  # topological order (the Instance contract)
        finish[t.name] = max((finish[p] for p in parents[t.name]), default=0.0) + fastest[t.name]
    return max(finish.values(), default=0.0)


def work_bound(instance: Instance) -> float:
    """Total smallest speed-1 core-seconds over the cluster's total core-speed."""
    one = instance.one_task_per_machine
    speed = {c.name: c.speed for c in instance.classes}
    work = sum(
        min(o.runtime * (1.0 if one else o.cores) * speed[o.machine_class] for o in t.options) for t in instance.tasks
    )
    capacity = sum(c.count * (1 if one else c.cores) * c.speed for c in instance.classes)
    return work / capacity if capacity > 0 else 0.0


def _gpu_weight(speed: float) -> float:
    return speed if speed > 0 else 1.0


def gpu_bound(instance: Instance) -> float:
    """Total least weighted GPU-seconds of the tasks that cannot run without a GPU, over the
    cluster's weighted GPU count (see the module docstring); 0 when no task needs a GPU."""
    weight = {c.name: _gpu_weight(c.gpu_speed) for c in instance.classes}
    work = 0.0
    for t in instance.tasks:
        if t.options and all(o.gpus > 0 for o in t.options):
            work += min(o.gpus * o.runtime * weight[o.machine_class] * max(1, t.replicas) for o in t.options)
    capacity = sum(c.count * c.gpus * _gpu_weight(c.gpu_speed) for c in instance.classes)
    return work / capacity if capacity > 0 and work > 0 else 0.0


def lower_bound(instance: Instance, *, strong: bool = False) -> float:
    """``max(critical_path, work_bound, gpu_bound)``: no plan of ``instance`` finishes sooner.
    ``strong=True`` also takes the pruned closed-form bound and, with OR-tools and at most
    ``LP_LIMIT`` task options, the pruned LP (module docstring): slower (seconds at 2,000
    tasks), never smaller."""
    base = max(critical_path(instance), work_bound(instance), gpu_bound(instance))
    if not strong or not instance.tasks:
        return base
    heads, tails = _heads_tails(instance)
    best = max(base, _crossing(lambda g: _pruned_closed_form(instance, heads, tails, g), base, _CLOSED_FORM_SEARCH))
    if sum(len(t.options) for t in instance.tasks) <= LP_LIMIT:

        def lp(g: float) -> float:
            sol = lp_solution(instance, _allowed(instance, heads, tails, g))
            return math.nan if sol is None else sol.makespan

        first = lp(math.inf)
        if not math.isnan(first):
            best = max(best, first, _crossing(lp, max(best, first), _LP_SEARCH))
    return best


def _heads_tails(instance: Instance) -> tuple[list[float], list[float]]:
    """Per task: the fastest chain that must run before it, and after it (communication free)."""
    index = {t.name: i for i, t in enumerate(instance.tasks)}
    fastest = [min(o.runtime for o in t.options) for t in instance.tasks]
    parents: list[list[int]] = [[] for _ in instance.tasks]
    for e in instance.edges:
        parents[index[e.child]].append(index[e.parent])
    n = len(instance.tasks)
    head = [0.0] * n
    for i in range(n):  # topological order (the Instance contract)
        head[i] = max((head[p] + fastest[p] for p in parents[i]), default=0.0)
    tail = [0.0] * n
    for i in reversed(range(n)):
        for p in parents[i]:
            tail[p] = max(tail[p], fastest[i] + tail[i])
    return head, tail


def _allowed(instance: Instance, heads: list[float], tails: list[float], g: float) -> list[list[bool]]:
    # a hair of slack: a plan of makespan exactly g keeps its options despite float sums
    limit = g * (1 + 1e-12)
    return [
        [h + o.runtime + q <= limit for o in t.options] for t, h, q in zip(instance.tasks, heads, tails, strict=True)
    ]


def _pruned_closed_form(instance: Instance, heads: list[float], tails: list[float], g: float) -> float:
    """The work and GPU terms over the options that a plan of makespan ``<= g`` can use, each
    with heads and tails (``_area_with_ends``)."""
    one = instance.one_task_per_machine
    speed = {c.name: c.speed for c in instance.classes}
    weight = {c.name: _gpu_weight(c.gpu_speed) for c in instance.classes}
    work: list[tuple[float, float, float]] = []
    gpu: list[tuple[float, float, float]] = []
    forced: list[tuple[list[Option], float, float]] = []
    for t, ok, h, q in zip(instance.tasks, _allowed(instance, heads, tails, g), heads, tails, strict=True):
        options = [o for o, yes in zip(t.options, ok, strict=True) if yes]
        if not options:
            return math.inf
        r = max(1, t.replicas)
        work.append((min(o.runtime * (1.0 if one else o.cores) * speed[o.machine_class] for o in options) * r, h, q))
        if all(o.gpus > 0 for o in options):
            gpu.append((min(o.gpus * o.runtime * weight[o.machine_class] for o in options) * r, h, q))
            forced += [(options, h, q)] * r  # one entry per replica: each holds its own GPUs
    if forced and not _gpu_rounds_fit(instance, forced, g):
        return math.inf
    cores = sum(c.count * (1 if one else c.cores) * c.speed for c in instance.classes)
    gpus = sum(c.count * c.gpus * _gpu_weight(c.gpu_speed) for c in instance.classes)
    return max(_area_with_ends(work, cores), _area_with_ends(gpu, gpus))


def _gpu_rounds_fit(instance: Instance, forced: list[tuple[list[Option], float, float]], g: float) -> bool:
    """Whether the steps that must run on GPUs (their options left, one entry per replica)
    can fit by count.  Take the steps whose every option runs at least ``p`` and whose tail
    is at least ``q``: each holds its GPUs at least its run time on its class, all inside
    ``[least head, g - q]``, so one GPU of class ``c`` holds at most ``floor(window / r_c)``
    of them (``r_c >= p``: the shortest run time on ``c`` among steps at least ``p`` long),
    one after another.  Tried for up to ``_ROUND_TESTS`` values of ``p`` (the steps'
    shortest run times) and, for each, every ``q``.  The area bound lets 73 equal steps
    share 64 GPUs in 1.14 rounds; this sees that a GPU runs them in whole rounds, and that
    the 9 of the second round finish no sooner than two run times before their tails."""
    units = {c.name: c.count * c.gpus for c in instance.classes}
    steps = sorted(((min(o.runtime for o in options), options, h, q) for options, h, q in forced), key=lambda s: -s[0])
    lengths = sorted({p for p, _, _, _ in steps if p > 0}, reverse=True)
    if len(lengths) > _ROUND_TESTS:
        lengths = [lengths[i * (len(lengths) - 1) // (_ROUND_TESTS - 1)] for i in range(_ROUND_TESTS)]
    for p in lengths:
        group = [s for s in steps if s[0] >= p]
        head = min(h for _, _, h, _ in group)
        shortest: dict[str, float] = {}  # per class: the shortest run time there in the group
        for _, options, _, _ in group:
            for o in options:
                shortest[o.machine_class] = min(shortest.get(o.machine_class, math.inf), o.runtime)
        need = 0
        for _, options, _, q in sorted(group, key=lambda s: -s[3]):  # longest tails first
            need += min(o.gpus for o in options)
            window = (g - head - q) * (1 + 1e-12)
            if window < 0 or need > sum(units[c] * math.floor(window / r) for c, r in shortest.items()):
                return False
    return True


def _area_with_ends(items: list[tuple[float, float, float]], capacity: float) -> float:
    """``items``: (work, head, tail) per task.  Every task whose tail is at least ``q`` runs
    inside ``[0, T - q]``, so ``T >= q + their work / capacity``; likewise with heads.  The
    largest over every ``q`` (and every head)."""
    if capacity <= 0 or not items:
        return 0.0
    best = 0.0
    for end in (2, 1):  # tails, then heads
        total = 0.0
        for item in sorted(items, key=lambda it: -it[end]):
            total += item[0]
            best = max(best, item[end] + total / capacity)
    return best


def _crossing(bound: Callable[[float], float], lo: float, search: tuple[int, float]) -> float:
    """The largest ``min(g, bound(g))`` found, ``bound`` falling as ``g`` grows: double ``g``
    from ``lo`` until ``bound(g) <= g``, then bisect.  Every ``min(g, bound(g))`` is a valid
    bound (module docstring), so any ``g`` tried may be kept; NaN (no answer) stops."""
    best = lo
    hi = lo * 2 if lo > 0 else 1.0
    for _ in range(40):
        b = bound(hi)
        if math.isnan(b):
            return best
        best = max(best, min(hi, b))
        if b <= hi:
            break
        lo, hi = hi, hi * 2
    else:
        return best
    steps, tolerance = search
    for _ in range(steps):
        if hi - lo <= tolerance * hi:
            break
        mid = (lo + hi) / 2
        b = bound(mid)
        if math.isnan(b):
            return best
        best = max(best, min(mid, b))
        if b <= mid:
            hi = mid
        else:
            lo = mid
    return best
