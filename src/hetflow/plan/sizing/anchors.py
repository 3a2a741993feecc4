"""Honest anchors for a virtual cluster's saving: the cheapest cluster of one node type, and
the cheapest mix of two, that meet the same deadline, each searched with the planner the
virtual search uses.

A saving quoted against the talk's common denominator (every node the one type that can run
every step, often the dearest GPU type) measures the strawman, not the mix: renting the
right single type already saves most of it.  These anchors are what a careful person would
rent without hetflow's search (issue 14).

Costs are the virtual search's: ``Σ count x price x makespan / 3600``.  Every candidate is
planned through ``evaluate`` (the virtual search's memoized planner), so the anchors' points
join its frontier.  The search is deterministic and bounded by a planning budget:

* **one type** (every type that can run every step): the fewest nodes meeting the deadline,
  by galloping from a work bound (``count x cores x deadline`` must hold every step's
  core-seconds) and bisection.  The planner's makespan is not guaranteed to fall as nodes
  are added, so the two counts below the one found are planned too (and below again, if one
  meets), and counts above while each is cheaper (more nodes can finish sooner for less).
* **two types** (every pair whose union runs every step, at least one node of each): sweep
  the count of the type with the smaller limit over about ``1.4^k`` steps, size the other as
  above for each, then halve the gaps around the best sweep value down to one node.
* **bounds** prune without planning: a cluster of types T costs at least its rate times the
  critical path over T (fastest option, free data) and at least the floor of ``cost_floor``;
  candidates whose bound is not below the best found are skipped, and say so.

Seeded with the clusters the virtual search already planned (``known``): a one- or two-type
cluster it found meeting the deadline is an anchor candidate too, so a weak anchor search
cannot flatter the saving.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, TypeGuard

from hetflow.plan.instance import Instance, MachineClass, Option
from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.spec import format_duration

Counts = tuple[int, ...]  # one count per catalog type, in catalog order
Evaluate = Callable[[Counts], ClusterPoint | None]

EPS = 1e-9  # seconds: a makespan this close to the deadline meets it
SWEEP_RATIO = 1.4  # successive sweep values of a pair's first type differ by about this factor
VERIFY_BELOW = 2  # counts planned below the fewest found meeting the deadline


def default_anchor_evaluations(instance: Instance) -> int:
    """Plannings for the anchors: every type and pair of the bench catalog on the small
    traces, fewer on the big ones (one planning of a 1,700-step trace takes ~0.1 s)."""
    return max(400, min(800, 100_000 // max(1, len(instance.tasks))))


@dataclass(frozen=True)
class Candidate:
    """One kind of cluster (one type, or a pair) at the deadline: the cheapest point found
    that meets it, or why there is none."""

    types: tuple[str, ...]
    point: ClusterPoint | None
    why: str  # why no point; with a point, "" or why it may not be the cheapest (a search cut short)
    lower_bound: float  # dollars: no cluster of these types meeting the deadline costs less
    plannings: int  # clusters this candidate asked the planner for (memoized ones included)

    def describe(self) -> str:
        what = " + ".join(self.types)
        if self.point is None:
            return f"{what}: {self.why}"
        return f"{what}: {self.point.describe()}" + (f" ({self.why})" if self.why else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "types": list(self.types),
            "point": self.point.to_json() if self.point is not None else None,
            "why": self.why,
            "lower_bound": self.lower_bound,
            "plannings": self.plannings,
        }


@dataclass(frozen=True)
class Anchors:
    deadline: float  # seconds
    single: ClusterPoint | None  # the cheapest one-type cluster meeting the deadline
    pair: ClusterPoint | None  # the cheapest two-type cluster meeting it
    singles: tuple[Candidate, ...]  # every type, cheapest first (None points last)
    pairs: tuple[Candidate, ...]  # every pair that can run every step, likewise
    plannings: int  # distinct clusters asked for
    capped: bool  # the budget ran out before every candidate was searched


# --- bounds ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bounds:
    critical_path: float  # seconds: longest chain, each step at its fastest option, free data
    core_seconds: float  # each step's fewest core-seconds (cores x run time x replicas)
    cost_floor: float  # dollars: no cluster of these types pays less for the steps' share


def _bounds(instance: Instance, types: frozenset[str]) -> _Bounds | None:
    """Bounds for a cluster of ``types`` only; None when some step has no option there.

    A node rented for the makespan M holds at most its cores for M, so ``price x M`` is at
    least the sum over its steps of ``price x run time x cores / node cores``; likewise for
    memory and GPUs, and for any fixed mix of the three shares.  Each mix (the three alone
    and their average) gives a floor summed step by step at the step's cheapest option; the
    highest is kept."""
    classes = {c.name: c for c in instance.classes if c.name in types}
    finish: dict[str, float] = {}
    parents: dict[str, list[str]] = {}
    for e in instance.edges:
        parents.setdefault(e.child, []).append(e.parent)
    core_seconds = 0.0
    floors = [0.0, 0.0, 0.0, 0.0]
    for t in instance.tasks:
        options = [o for o in t.options if o.machine_class in classes]
        if not options:
            return None
        start = max((finish[p] for p in parents.get(t.name, ())), default=0.0)
        finish[t.name] = start + min(o.runtime for o in options)
        if not instance.one_task_per_machine:  # one task a machine: cores do not bound the count
            core_seconds += min(o.runtime * o.cores for o in options) * t.replicas
        shares = [_shares(o, classes[o.machine_class], instance.one_task_per_machine) for o in options]
        for k, weights in enumerate(((1, 0, 0), (0, 1, 0), (0, 0, 1), (1 / 3, 1 / 3, 1 / 3))):
            floors[k] += min(
                o.runtime * t.replicas * classes[o.machine_class].price_per_hour / 3600 * sum(map(_mul, weights, s))
                for o, s in zip(options, shares, strict=True)
            )
    return _Bounds(max(finish.values(), default=0.0), core_seconds, max(floors))


def _shares(o: Option, c: MachineClass, whole: bool) -> tuple[float, float, float]:
    """The part of a node of ``c`` that option ``o`` holds, by cores, memory and GPUs (all of
    it when a machine runs one task at a time)."""
    if whole:
        return (1.0, 1.0, 1.0)
    return (_share(o.cores, c.cores), _share(o.memory, c.memory), _share(o.gpus, c.gpus))


def _share(used: float, capacity: float) -> float:
    return used / capacity if capacity > 0 else 0.0


def _mul(a: float, b: float) -> float:
    return a * b


# --- the search ------------------------------------------------------------------------------------


class _Spent(Exception):
    """The planning budget ran out (control flow inside this module only)."""


class _Anchor:
    def __init__(self, instance: Instance, evaluate: Evaluate, limits: Counts, deadline: float, cap: int) -> None:
        self.classes: tuple[MachineClass, ...] = instance.classes
        self.evaluate, self.limits, self.deadline, self.cap = evaluate, limits, deadline, cap
        self.asked: dict[Counts, ClusterPoint | None] = {}

    def plan(self, counts: Counts) -> ClusterPoint | None:
        if counts not in self.asked:
            if len(self.asked) >= self.cap:
                raise _Spent
            self.asked[counts] = self.evaluate(counts)
        return self.asked[counts]

    def meets(self, p: ClusterPoint | None) -> TypeGuard[ClusterPoint]:
        return p is not None and p.makespan <= self.deadline + EPS

    def rate(self, counts: Counts) -> float:
        return sum(c.price_per_hour * n for c, n in zip(self.classes, counts, strict=True))

    def size(
        self, counts: Counts, index: int, lo: int, bound: _Bounds, best: float, hint: int | None = None
    ) -> tuple[ClusterPoint | None, str]:
        """The cheapest point found with ``counts`` but type ``index`` at a count from ``lo``
        up: the fewest meeting the deadline, by galloping from ``hint`` (a count likely to be
        near the answer; else ``lo``) and bisection, then checked below and above (module
        docstring).  Gives up, saying why, when the bound at a count reaches ``best``."""
        name, hi = self.classes[index].name, self.limits[index]
        if lo > hi:
            return None, f"{name} would need more than the {hi} rentable by the work bound"

        def at(n: int) -> ClusterPoint | None:
            return self.plan((*counts[:index], n, *counts[index + 1 :]))

        def hopeless(n: int) -> bool:  # the rate grows with n: so does this bound
            return self.rate((*counts[:index], n, *counts[index + 1 :])) * bound.critical_path / 3600 >= best

        start = min(hi, max(lo, hint if hint is not None else lo))
        fail, first, step = lo - 1, None, 1  # fail: a count that misses (or lo - 1); first: one that meets
        n = lo if hopeless(start) else start  # fewer nodes may still be worth it
        if n > lo and self.meets(at(n)):  # gallop down from the hint
            first = n
            while first - step > fail + 1:
                m = first - step
                if self.meets(at(m)):
                    first, step = m, step * 2
                else:
                    fail = m
                    break
        while first is None:  # gallop up
            if hopeless(n):
                return None, f"{n} x {name} or more cannot cost less than ${best:,.2f}"
            if self.meets(at(n)):
                first = n
            elif n >= hi:
                quickest = min((q.makespan for q in self._sized(counts, index) if q is not None), default=math.inf)
                return None, f"even {hi} x {name} take {format_duration(quickest)}"
            else:
                fail, n, step = n, min(hi, n + step), step * 2
        while first - fail > 1:  # bisection: fail misses (or is below lo), first meets
            mid = (fail + first) // 2
            fail, first = (fail, mid) if self.meets(at(mid)) else (mid, first)
        low = first
        while True:  # the planner is not monotone in the count: look a little lower
            lower = [m for m in range(low - 1 - VERIFY_BELOW, low - 1) if m >= lo]
            hits = [m for m in lower if self.meets(at(m))]
            if not hits:
                break
            low = min(hits)
        cheapest = min((q for q in self._sized(counts, index) if self.meets(q)), key=_price)
        n = _count(cheapest, name)
        while n < hi and not hopeless(n + 1):  # more nodes can be cheaper when they finish sooner
            q = at(n + 1)
            if not self.meets(q) or _price(q) >= _price(cheapest):
                break
            cheapest, n = q, n + 1
        return cheapest, ""

    def _sized(self, counts: Counts, index: int) -> list[ClusterPoint | None]:  # None: cannot run
        """Points asked for that differ from ``counts`` only at ``index``."""
        others = counts[:index] + counts[index + 1 :]
        return [p for c, p in self.asked.items() if c[:index] + c[index + 1 :] == others and c[index] > 0]

    def one(self, g: tuple[int, ...], b: _Bounds, best: float) -> tuple[ClusterPoint | None, str]:
        """The cheapest cluster of the one type ``g`` meeting the deadline (``search_anchors``)."""
        (i,) = g
        zero = (0,) * len(self.limits)
        return self.size(zero, i, _at_least(b.core_seconds, self.deadline, self.classes[i].cores), b, best)

    def two(self, g: tuple[int, ...], b: _Bounds, best: float) -> tuple[ClusterPoint | None, str]:
        """The cheapest cluster of the two types ``g`` meeting the deadline: one type's count
        swept, the other sized for each (``search_anchors``)."""
        limits, deadline, zero = self.limits, self.deadline, (0,) * len(self.limits)
        s, o = sorted(g, key=lambda i: (limits[i], -i))  # sweep the type with the smaller limit
        cs, co = self.classes[s], self.classes[o]
        found: dict[int, ClusterPoint] = {}
        tried: set[int] = set()
        why = ""

        def size_at(v: int) -> None:
            nonlocal why, best
            tried.add(v)
            counts = (*zero[:s], v, *zero[s + 1 :])
            lo = _at_least(b.core_seconds, deadline, co.cores, v * cs.cores)
            near = [w for w in found if w < v]  # the other type's count at the nearest fewer: about enough
            hint = _count(found[max(near)], co.name) if near else None
            p, why = self.size(counts, o, lo, b, best, hint)
            if p is not None:
                found[v] = p
                best = min(best, p.cost)

        for v in _sweep(limits[s]):
            size_at(v)
        while found:  # halve the gaps either side of the best value, down to one node
            centre = min(found, key=lambda v: _price(found[v]))
            below = max((v for v in tried if v < centre), default=centre)
            above = min((v for v in tried if v > centre), default=centre)
            todo = [v for v in ((below + centre) // 2, (centre + above) // 2) if v not in tried]
            if not todo:
                break
            for v in todo:
                size_at(v)
        if not found:
            return None, why
        return min(found.values(), key=_price), ""


def _price(p: ClusterPoint) -> tuple[float, float]:
    return (p.cost, p.makespan)


def _count(p: ClusterPoint, name: str) -> int:
    return dict(p.counts).get(name, 0)


def _at_least(core_seconds: float, deadline: float, cores: int, other: float = 0.0) -> int:
    """The fewest nodes of ``cores`` cores that, beside ``other`` cores, can hold
    ``core_seconds`` within ``deadline``."""
    need = core_seconds / deadline - other
    return max(1, math.ceil(need / cores - 1e-9)) if cores > 0 else 1


def _sweep(limit: int) -> list[int]:
    out, n = [1], 1.0
    while out[-1] < limit:
        n *= SWEEP_RATIO
        out.append(min(limit, max(out[-1] + 1, round(n))))
    return out


Search = Callable[[tuple[int, ...], "_Bounds", float], tuple["ClusterPoint | None", str]]


def search_anchors(
    instance: Instance,
    evaluate: Evaluate,
    limits: Counts,
    deadline: float,
    *,
    known: Sequence[ClusterPoint] = (),
    max_evaluations: int | None = None,
) -> Anchors:
    """The cheapest one-type and two-type clusters meeting ``deadline`` (module docstring);
    ``limits`` are the most of each catalog type, in catalog order; ``known``: clusters
    already planned, candidates too."""
    cap = default_anchor_evaluations(instance) if max_evaluations is None else max_evaluations
    a = _Anchor(instance, evaluate, limits, deadline, cap)
    names = [c.name for c in instance.classes]
    seeds: dict[frozenset[str], ClusterPoint] = {}
    for p in known:
        key = frozenset(_types(p))
        if a.meets(p) and (key not in seeds or _price(p) < _price(seeds[key])):
            seeds[key] = p
    spent = False

    def run(groups: list[tuple[int, ...]], search: Search) -> tuple[ClusterPoint | None, list[Candidate]]:
        """Search ``groups`` (index tuples) by lower bound, cheapest first."""
        nonlocal spent
        size = len(groups[0]) if groups else 0
        best = min((p for k, p in seeds.items() if len(k) == size), key=_price, default=None)
        out: list[Candidate] = []
        ranked: list[tuple[float, tuple[int, ...], _Bounds | None]] = []
        for g in groups:
            b = _bounds(instance, frozenset(names[i] for i in g))
            rate = sum(instance.classes[i].price_per_hour for i in g)
            ranked.append((math.inf if b is None else max(b.cost_floor, rate * b.critical_path / 3600), g, b))
        for floor, g, b in sorted(ranked, key=lambda r: (r[0], r[1])):
            label = tuple(names[i] for i in g)
            seed = seeds.get(frozenset(label))
            cost = best.cost if best is not None else math.inf
            found, why, before = None, "", len(a.asked)
            if b is None:
                why = "cannot run every step"
            elif any(limits[i] == 0 for i in g):
                why = "none may be rented (limit 0)"
            elif b.critical_path > deadline + EPS:
                why = f"its critical path alone takes {format_duration(b.critical_path)}"
            elif floor >= cost:
                why = f"costs at least ${floor:,.2f}, not below ${cost:,.2f}: not planned"
            elif spent:
                why = f"not searched: the budget of {cap} plannings was spent"
            else:
                try:
                    found, why = search(g, b, cost)
                except _Spent:
                    spent, why = True, f"search cut short: the budget of {cap} plannings was spent"
                    mine = [p for p in a.asked.values() if a.meets(p) and _types(p) == set(label)]
                    found = min(mine, key=_price, default=None)
            if seed is not None and (found is None or _price(seed) < _price(found)):
                found = seed  # the virtual search found a cheaper one of these types
            if found is not None and (best is None or _price(found) < _price(best)):
                best = found
            if found is not None and "cut short" not in why:
                why = ""
            out.append(Candidate(label, found, why, floor, len(a.asked) - before))
        out.sort(key=lambda c: (c.point is None, _price(c.point) if c.point is not None else (c.lower_bound, 0.0)))
        return best, out

    single, singles = run([(i,) for i in range(len(names))], a.one)
    pair_groups: list[tuple[int, ...]] = list(combinations(range(len(names)), 2))
    pair, pairs = run(pair_groups, a.two)
    pairs = [c for c in pairs if c.why != "cannot run every step"]  # only pairs that can run it all
    return Anchors(deadline, single, pair, tuple(singles), tuple(pairs), len(a.asked), spent)


def _types(p: ClusterPoint) -> set[str]:
    return {t for t, _ in p.counts}
