"""Choosing on a frontier of planned clusters: the non-dominated points (``pareto``), the
knee, the point a deadline or a budget asks for (``choose``), and where on the frontier the
search should look closer (``focus``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.spec import format_duration


def pareto(points: Sequence[ClusterPoint]) -> tuple[ClusterPoint, ...]:
    """The non-dominated points by makespan ascending; of equal points the first is kept."""
    out: list[ClusterPoint] = []
    for p in sorted(points, key=lambda p: (p.makespan, p.cost)):
        if not out or p.cost < out[-1].cost - 1e-12:  # cheaper than every faster point
            out.append(p)
    return tuple(out)


def _knee_distance(frontier: Sequence[ClusterPoint], p: ClusterPoint) -> float:
    m0, m1 = frontier[0].makespan, frontier[-1].makespan
    c0, c1 = frontier[-1].cost, frontier[0].cost
    dm = (p.makespan - m0) / (m1 - m0) if m1 > m0 else 0.0
    dc = (p.cost - c0) / (c1 - c0) if c1 > c0 else 0.0
    return math.hypot(dm, dc)


def knee(frontier: Sequence[ClusterPoint]) -> ClusterPoint:
    """The frontier point closest to the ideal (fastest makespan, lowest cost), both axes
    scaled to [0, 1] over the frontier."""
    return min(frontier, key=lambda p: _knee_distance(frontier, p))


def choose(
    frontier: Sequence[ClusterPoint], deadline: float | None, budget: float | None
) -> tuple[ClusterPoint | None, str]:
    """The point the caller asked for, with the rule used, or None and why not."""
    if not frontier:
        return None, "no cluster could run the workflow"
    if deadline is not None:
        meet = [p for p in frontier if p.makespan <= deadline]
        within = [p for p in meet if budget is None or p.cost <= budget]
        if within:
            best = min(within, key=lambda p: (p.cost, p.makespan))
            return best, f"the cheapest cluster meeting the deadline of {format_duration(deadline)}"
        if meet:
            cheapest = min(meet, key=lambda p: p.cost)
            return None, (
                f"no cluster found meets the deadline of {format_duration(deadline)} within ${budget:,.2f}; "
                f"the cheapest that meets it costs ${cheapest.cost:,.2f} ({cheapest.describe()})"
            )
        fastest = frontier[0]
        return None, (
            f"no cluster found meets the deadline of {format_duration(deadline)}; the fastest found takes "
            f"{format_duration(fastest.makespan)} ({fastest.describe()}): relax the deadline or allow more nodes"
        )
    if budget is not None:
        within = [p for p in frontier if p.cost <= budget]
        if within:
            return min(within, key=lambda p: (p.makespan, p.cost)), f"the fastest cluster within ${budget:,.2f}"
        cheapest = frontier[-1]
        return None, (
            f"no cluster found costs at most ${budget:,.2f}; the cheapest found costs ${cheapest.cost:,.2f} "
            f"({cheapest.describe()})"
        )
    return knee(frontier), "the knee of the frontier (no deadline or budget given)"


def focus(deadline: float | None, budget: float | None) -> Callable[[Sequence[ClusterPoint]], float]:
    """Where on the frontier (an index into it, by makespan) the answer lies: between the
    slowest point meeting the deadline and the next, between the last point over the
    budget and the next, or at the knee."""

    def at(frontier: Sequence[ClusterPoint]) -> float:
        if deadline is not None:
            return sum(1 for p in frontier if p.makespan <= deadline) - 0.5
        if budget is not None:
            return sum(1 for p in frontier if p.cost > budget) - 0.5
        best = knee(frontier)
        return float(next(i for i, p in enumerate(frontier) if p is best))

    return at
