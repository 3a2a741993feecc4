"""Virtual clusters: how many nodes of each rentable type to run a workflow on.

The "virtual supercomputer" talk (shared/seeds/000) contrasts two ways to provision a
workflow whose steps differ: the *common denominator* (every node of one type that can run
every step: GPU nodes when a step needs a GPU, nodes for the most memory-hungry step) and
a *virtual cluster* assembled per workflow to trade performance against budget.  This
module finds the second and prices the first.

A cluster is rented for the whole run, so its cost is ``Σ count x price_per_hour x
makespan / 3600``.  Each candidate (counts per node type) is planned for makespan by the
planner; the search is deterministic and bounded by ``max_evaluations`` plannings (plus the
few that size the common denominator):

1. start from a cheap cover: one node of each type needed so that every step has a type
   that can run it (greedy set cover, most steps per dollar first);
2. grow (two thirds of the plannings): add to one type at a time (one node, or half as many
   again as it has), taking the move that cuts the most makespan per extra dollar (a move
   that is no slower and cheaper wins outright), until no move gains 1%.  The walk ignores
   the deadline and budget, so that it does not stop at the first, costly, way to meet them;
3. explore (the rest): Pareto local search around the frontier, one node more or fewer of
   each type, nearest the answer first (the deadline's or budget's edge, or the knee).
   This is also where "nodes whose removal does not hurt" are removed;
4. choose: the cheapest point meeting the deadline (within the budget, if given), else the
   fastest within the budget, else the knee of the frontier.

The saving is quoted at one deadline (the given one, else the chosen point's makespan)
against two anchors that ``plan.sizing.anchors`` searches with the same planner: the cheapest
cluster of a single type, and the cheapest mix of two types, that meet it.  Their points
join the search's, so the cluster recommended is the cheapest of all that meet the
deadline: when an anchor search finds it, the saving against that anchor is 0 and the
result says so.  The talk's common denominator is still priced (``strawman``), but a saving
against it mostly measures the dearest node type (issue 14), so it is not the headline.

Every planned cluster is kept; the Pareto frontier (makespan vs cost) is drawn from all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hetflow.plan.build import build_instance
from hetflow.plan.instance import Instance, MachineClass, Plan
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.sizing.anchors import EPS, Anchors, search_anchors
from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.plan.sizing.pareto import choose, focus, pareto
from hetflow.plan.sizing.results import AnchoredComparison, Comparison, VirtualClusterResult, price
from hetflow.spec import Workflow

Planner = Callable[[Instance], Plan]
Counts = tuple[int, ...]  # one count per catalog type, in catalog order

MIN_GAIN = 0.01  # a growth move must cut the makespan by at least this fraction
# Schedule builds per candidate: one list pass (HEFT's upward rank and earliest finish, with
# the planner's GPU rule) and no local search.  Candidates are compared with others planned
# alike, and 40-odd of them for a 1,700-step trace must take seconds, not minutes; plan the
# chosen cluster again with the full planner to run it.
SEARCH_EFFORT = 4


def default_evaluations(instance: Instance) -> int:
    """Plannings for the search: many for small workflows, fewer for big ones, so that the
    five bench traces on the cloud catalog take about 30 s in all on one core."""
    return max(48, min(240, 30_000 // max(1, len(instance.tasks))))


def restrict(instance: Instance, counts: Mapping[str, int]) -> Instance | None:
    """``instance`` on ``counts`` nodes per class (classes at 0 dropped), or None when some
    task then has no option."""
    classes = tuple(dataclasses.replace(c, count=counts.get(c.name, 0)) for c in instance.classes)
    kept = {c.name for c in classes if c.count > 0}
    tasks = []
    for t in instance.tasks:
        options = tuple(o for o in t.options if o.machine_class in kept)
        if not options:
            return None
        tasks.append(dataclasses.replace(t, options=options))
    return dataclasses.replace(instance, tasks=tuple(tasks), classes=tuple(c for c in classes if c.count > 0))


def runnable(instance: Instance) -> dict[str, set[str]]:
    """Class name -> the tasks it has an option for."""
    out: dict[str, set[str]] = {c.name: set() for c in instance.classes}
    for t in instance.tasks:
        for o in t.options:
            out[o.machine_class].add(t.name)
    return out


def common_denominator(instance: Instance) -> str | None:
    """The one type the talk's common-denominator cluster is made of: among the types that
    can run every step, a GPU type when some step can run only on GPUs, and of those the
    one with the most memory (then the most GPUs, then the lowest price)."""
    can = runnable(instance)
    everything = {t.name for t in instance.tasks}
    universal = [c for c in instance.classes if can[c.name] >= everything]
    gpu_only = any(all(o.gpus > 0 for o in t.options) for t in instance.tasks)
    if gpu_only:
        universal = [c for c in universal if c.gpus > 0]
    if not universal:
        return None
    return max(universal, key=lambda c: (c.memory, c.gpus, -c.price_per_hour)).name


def _cover(instance: Instance, limits: Counts) -> Counts:
    """One node of each type of a greedy set cover: most uncovered steps per dollar first."""
    can = runnable(instance)
    left = {t.name for t in instance.tasks}
    counts = [0] * len(instance.classes)
    while left:
        best, best_key = -1, (0.0, 0)
        for i, c in enumerate(instance.classes):
            n = len(can[c.name] & left)
            if counts[i] or not limits[i] or not n:
                continue
            key = (n / c.price_per_hour if c.price_per_hour > 0 else math.inf, n)
            if best < 0 or key > best_key:
                best, best_key = i, key
        if best < 0:
            break  # what is left fits no type within the limits: evaluate() reports it
        counts[best] = 1
        left -= can[instance.classes[best].name]
    return tuple(counts)


def _with(counts: Counts, i: int, n: int) -> Counts:
    return (*counts[:i], n, *counts[i + 1 :])


# --- the search -------------------------------------------------------------------------------


@dataclass
class _Search:
    instance: Instance
    planner: Planner
    limits: Counts
    cap: int  # plannings allowed so far; raised for each phase
    seen: dict[Counts, ClusterPoint | None] = field(default_factory=dict)
    expanded: set[Counts] = field(default_factory=set)
    capped: bool = False  # a phase stopped at its cap rather than running out of moves

    @property
    def exhausted(self) -> bool:
        return len(self.seen) >= self.cap

    def evaluate(self, counts: Counts, *, force: bool = False) -> ClusterPoint | None:
        """Plan ``counts`` (memoized); None when infeasible or past the cap (``force``
        overrides the cap, for the few plannings a result cannot lack)."""
        if counts in self.seen:
            return self.seen[counts]
        if self.exhausted and not force:
            self.capped = True
            return None
        named = {c.name: n for c, n in zip(self.instance.classes, counts, strict=True)}
        sub = restrict(self.instance, named)
        point = None
        if sub is not None and any(counts):
            plan = self.planner(sub)
            rate = sum(c.price_per_hour * n for c, n in zip(self.instance.classes, counts, strict=True))
            kept = tuple((c.name, n) for c, n in zip(self.instance.classes, counts, strict=True) if n)
            point = ClusterPoint(kept, plan.makespan, rate * plan.makespan / 3600.0, rate, plan)
        self.seen[counts] = point
        return point

    def points(self) -> list[ClusterPoint]:
        return [p for p in self.seen.values() if p is not None]

    def counts_of(self, point: ClusterPoint) -> Counts:
        return tuple(point.count(c.name) for c in self.instance.classes)

    def grow(self, start: Counts) -> None:
        """Walk from ``start``, adding to one type at a time (one node, or half as many again
        as it has), by the move with the most makespan cut per extra dollar; a move that is
        no slower and cheaper wins outright.  Stops when no move gains ``MIN_GAIN``."""
        current, counts = self.evaluate(start, force=True), start
        while current is not None and not self.exhausted:
            best: tuple[tuple[int, float], Counts] | None = None
            for i, n in enumerate(counts):
                if n >= self.limits[i]:
                    continue
                cand = _with(counts, i, min(self.limits[i], n + max(1, n // 2)))
                p = self.evaluate(cand)
                if p is None:
                    continue
                gain, extra = current.makespan - p.makespan, p.cost - current.cost
                if extra < 0 and gain >= 0:
                    key = (1, -extra)
                elif gain > MIN_GAIN * current.makespan:
                    key = (0, gain / extra if extra > 0 else math.inf)
                else:
                    continue
                if best is None or key > best[0]:
                    best = (key, cand)
            if best is None:
                return
            counts, current = best[1], self.seen[best[1]]

    def explore(self, focus: Callable[[Sequence[ClusterPoint]], float]) -> None:
        """Pareto local search (Paquete, Chiarandini and Stützle, 2004): plan every one-node
        change (one more or one fewer of a type) of a frontier point, the points nearest the
        ``focus`` first, until every frontier point is expanded or the cap is reached."""
        while not self.exhausted:
            frontier = pareto(self.points())
            at = focus(frontier)
            todo = [(abs(i - at), i) for i, p in enumerate(frontier) if self.counts_of(p) not in self.expanded]
            if not todo:
                return
            counts = self.counts_of(frontier[min(todo)[1]])
            self.expanded.add(counts)
            for i, n in enumerate(counts):
                for m in (n - 1, n + 1):
                    if 0 <= m <= self.limits[i]:
                        self.evaluate(_with(counts, i, m))


# --- the common denominator -------------------------------------------------------------------------


def _size_common(search: _Search, index: int, target: float) -> ClusterPoint | None:
    """The fewest nodes of type ``index`` meeting ``target``, or its fastest size when none
    does (sizes tried: 1, 2, 4, ... the limit, then bisection)."""
    limit = search.limits[index]
    zero = (0,) * len(search.limits)

    def at(n: int) -> ClusterPoint | None:
        return search.evaluate(_with(zero, index, n), force=True)

    sizes, n = [], 1
    while n < limit:
        sizes.append(n)
        n *= 2
    if limit > 0:
        sizes.append(limit)
    tried: list[tuple[int, ClusterPoint]] = [(k, p) for k in sizes if (p := at(k)) is not None]
    if not tried:
        return None
    meets = [(k, p) for k, p in tried if p.makespan <= target]
    if not meets:
        return min(tried, key=lambda kp: (kp[1].makespan, kp[0]))[1]
    hi, best = meets[0]
    lo = max([k for k, _ in tried if k < hi], default=0)
    while hi - lo > 1:  # makespan falls as nodes are added, near enough for sizing
        mid = (lo + hi) // 2
        p = at(mid)
        if p is not None and p.makespan <= target:
            hi, best = mid, p
        else:
            lo = mid
    return best


def _compare(frontier: Sequence[ClusterPoint], common: ClusterPoint, target: float) -> Comparison:
    deadline = target if common.makespan <= target else common.makespan
    meet = [p for p in frontier if p.makespan <= deadline + 1e-9]
    virtual = min(meet, key=lambda p: (p.cost, p.makespan))  # common itself is a candidate
    saving = 1.0 - virtual.cost / common.cost if common.cost > 0 else 0.0
    return Comparison(deadline, common, virtual, saving)


# --- entry points -----------------------------------------------------------------------------------


def _rounds(
    search: _Search,
    instance: Instance,
    limits: Counts,
    name: str | None,
    deadline: float | None,
    budget: float | None,
    anchor_evaluations: int | None,
) -> tuple[tuple[ClusterPoint, ...], ClusterPoint | None, Anchors | None, float, str]:
    """Size the common denominator ``name`` and search the anchors until the chosen point
    stands (``search_virtual_cluster``): (frontier, common, anchors, the deadline compared
    at, the rule that set it)."""
    common: ClusterPoint | None = None
    anchors: Anchors | None = None
    names = [c.name for c in instance.classes]
    target, target_rule = 0.0, ""
    frontier = pareto(search.points())
    # Sizing the common denominator and searching the anchors plan clusters that join the
    # frontier and can move the chosen point (the knee above all), and so the deadline to
    # compare at: go round until the choice stands (plannings are memoized, so a second
    # round is cheap).
    # A fourth round only searches the anchors at the last choice's makespan.
    for last in (False, False, False, True):
        chosen, rule = choose(frontier, deadline, budget)
        # the deadline given, else the chosen point's makespan, else the fastest it can do
        target = deadline if deadline is not None else (chosen.makespan if chosen is not None else 0.0)
        target_rule = rule
        if last and (anchors is None or anchors.deadline == target):
            break
        if name is not None and not last:
            common = _size_common(search, names.index(name), target)
        if target > 0:
            anchors = search_anchors(
                instance,
                lambda counts: search.evaluate(counts, force=True),
                limits,
                target,
                known=search.points(),
                max_evaluations=anchor_evaluations,
            )
        frontier = pareto(search.points())
        if not last and choose(frontier, deadline, budget)[0] == chosen:
            break
    return frontier, common, anchors, target, target_rule


def search_virtual_cluster(
    instance: Instance,
    planner: Planner,
    *,
    deadline: float | None = None,
    budget: float | None = None,
    max_per_type: int | None = None,
    common_type: str | None = None,
    max_evaluations: int | None = None,
    anchor_evaluations: int | None = None,
) -> VirtualClusterResult:
    """The search on a planning instance whose classes are the catalog (``count`` = the
    most rentable); ``planner`` plans one candidate for makespan.  Pure when the planner is.
    ``anchor_evaluations`` bounds the anchor search (``plan.sizing.anchors``) at each deadline."""
    if deadline is not None and deadline <= 0:
        raise ValueError(f"deadline must be positive seconds, got {deadline}")
    if budget is not None and budget < 0:
        raise ValueError(f"budget must be non-negative dollars, got {budget}")
    limits = tuple(min(c.count, max_per_type) if max_per_type is not None else c.count for c in instance.classes)
    total = default_evaluations(instance) if max_evaluations is None else max_evaluations
    search = _Search(instance, planner, limits, cap=2 * total // 3)
    notes: list[str] = []
    search.grow(_cover(instance, limits))
    search.cap = total
    search.explore(focus(deadline, budget))
    own = search.points()  # the virtual search's own clusters, before any anchor or sizing

    names = [c.name for c in instance.classes]
    if common_type is not None and common_type not in names:
        raise ValueError(f"common_type {common_type!r} is not a catalog type; the types are {', '.join(names)}")
    name = common_type or common_denominator(instance)
    if name is None:
        notes.append("no single type can run every step, so there is no common-denominator cluster to compare with")
    frontier, common, anchors, target, target_rule = _rounds(
        search, instance, limits, name, deadline, budget, anchor_evaluations
    )
    chosen, rule = choose(frontier, deadline, budget)
    comparison = None
    if anchors is not None:
        comparison = _anchored(search.points(), own, anchors, _deadline_rule(deadline, budget))
        better = comparison.virtual
        if deadline is None and better is not None and better != chosen:
            # With no deadline the knee (or the fastest within the budget) set the deadline,
            # and the anchors' clusters can move the knee again: recommend the cheapest
            # cluster as fast as the deadline compared at, so that the headline is about it.
            chosen, rule = better, f"{target_rule}, then the cheapest cluster found as fast"
    strawman = None
    if common is not None:
        strawman = _compare(frontier, common, target)
    elif name is not None:
        notes.append(f"{name} cannot run every step of this workflow")
    if search.capped:
        notes.append(f"the search stopped after {total} plannings (max_evaluations); the frontier may be incomplete")
    return VirtualClusterResult(
        frontier,
        chosen,
        rule,
        name,
        common,
        comparison,
        strawman,
        len(search.seen),
        tuple(notes),
        tuple(search.points()),
    )


def _deadline_rule(deadline: float | None, budget: float | None) -> str:
    if deadline is not None:
        return "the deadline given"
    if budget is not None:
        return "the makespan of the fastest cluster found within the budget"
    return "the makespan of the chosen cluster, the knee of the frontier"


def _anchored(
    points: Sequence[ClusterPoint], own: Sequence[ClusterPoint], anchors: Anchors, rule: str
) -> AnchoredComparison:
    """The cheapest of ``points`` meeting the anchors' deadline, against them."""
    d = anchors.deadline
    virtual = min((p for p in points if p.makespan <= d + EPS), key=price, default=None)
    mine = min((p for p in own if p.makespan <= d + EPS), key=price, default=None)
    if virtual is None or (mine is not None and price(mine) <= price(virtual)):
        found_by = "the virtual search"
    elif len(virtual.counts) == 1:
        found_by = "the one-type search"
    else:
        found_by = "the two-type search"
    return AnchoredComparison(d, rule, virtual, found_by, mine, anchors)


def plan_virtual_cluster(
    workflow: Workflow,
    catalog_classes: Sequence[MachineClass],
    *,
    bandwidth: float,
    deadline: float | None = None,
    budget: float | None = None,
    max_per_type: int | None = None,
    seed: int = 0,
    common_type: str | None = None,
    max_evaluations: int | None = None,
    anchor_evaluations: int | None = None,
    effort: int | None = SEARCH_EFFORT,
    planner: Planner | None = None,
) -> VirtualClusterResult:
    """Counts per catalog node type for ``workflow``: the frontier, the chosen point, its
    saving against the searched anchors and the common-denominator strawman (module
    docstring).  ``catalog_classes`` carry the most
    rentable of each type as ``count``; ``planner`` defaults to ``plan_heuristic`` for
    makespan with ``seed`` and ``effort`` schedule builds per candidate (None: its own
    default, slower).  Raises NoFitError when some step fits no catalog type."""
    instance = build_instance(workflow, catalog_classes, bandwidth=bandwidth)
    if planner is None:
        planner = _heuristic(seed, effort)
    return search_virtual_cluster(
        instance,
        planner,
        deadline=deadline,
        budget=budget,
        max_per_type=max_per_type,
        common_type=common_type,
        max_evaluations=max_evaluations,
        anchor_evaluations=anchor_evaluations,
    )


def _heuristic(seed: int, effort: int | None) -> Planner:
    return lambda inst: plan_heuristic(inst, objective="makespan", seed=seed, effort=effort)
