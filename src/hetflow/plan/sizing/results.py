"""What the virtual-cluster search answers: the Pareto frontier and the point chosen
(``VirtualClusterResult``), the strawman against the common denominator (``Comparison``)
and the headline against the cheapest single type and two-type mix (``AnchoredComparison``).
Frozen values that ``report`` and the UI render; ``virtual`` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hetflow.plan.sizing.anchors import Anchors
from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.spec import format_duration


@dataclass(frozen=True)
class Comparison:
    """The strawman: the chosen kind of cluster against the common denominator (every node
    the one type that runs every step) at one deadline, which is the common denominator's
    own fastest makespan when it cannot meet the one asked for."""

    deadline: float  # seconds: the deadline both meet
    common: ClusterPoint
    virtual: ClusterPoint  # the cheapest evaluated cluster meeting ``deadline``
    saving: float  # 1 - virtual.cost / common.cost (0.3 = 30% cheaper)


@dataclass(frozen=True)
class AnchoredComparison:
    """The headline: the cheapest cluster found against the cheapest single type and the
    cheapest two-type mix, all three meeting one deadline (module docstring)."""

    deadline: float  # seconds
    deadline_rule: str  # where the deadline comes from, for people
    virtual: ClusterPoint | None  # the cheapest cluster planned that meets ``deadline``
    found_by: str  # which search found ``virtual``: "the virtual search", "the one-type search", ...
    own: ClusterPoint | None  # the virtual search's own cheapest meeting it, before the anchors
    anchors: Anchors

    @property
    def single(self) -> ClusterPoint | None:
        return self.anchors.single

    @property
    def pair(self) -> ClusterPoint | None:
        return self.anchors.pair

    @property
    def saving_vs_single(self) -> float | None:
        return saving(self.virtual, self.single)

    @property
    def saving_vs_pair(self) -> float | None:
        return saving(self.virtual, self.pair)

    def lines(self) -> list[str]:
        out = [f"at a deadline of {format_duration(self.deadline)} ({self.deadline_rule}):"]
        if self.virtual is None:
            return [*out, "  no cluster found meets it: nothing to compare"]
        for label, p in (("cheapest single type meeting it", self.single), ("best two-type mix", self.pair)):
            out.append(f"  {label}: {p.describe() if p is not None else 'none found'}")
        out.append(f"  cheapest cluster found: {self.virtual.describe()} (by {self.found_by})")
        s1, s2 = self.saving_vs_single, self.saving_vs_pair
        if s1 is not None and s2 is not None:
            out.append(f"  the virtual cluster costs {s1:.0%} less than the first and {s2:.0%} less than the second")
        elif s1 is not None:
            out.append(f"  the virtual cluster costs {s1:.0%} less than the cheapest single type")
        if len(self.virtual.counts) <= 2:
            kind = "a single type" if len(self.virtual.counts) == 1 else "a two-type mix"
            out.append(f"  the cheapest cluster found is itself {kind}: the mix search adds nothing here")
        if self.own is not None and price(self.own) > price(self.virtual):
            out.append(
                f"  the virtual search alone found {self.own.describe()}; {self.found_by} found one "
                f"{saving(self.virtual, self.own):.0%} cheaper, and it is the one recommended"
            )
        if self.anchors.capped:
            out.append(
                "  the anchor search ran out of plannings: an anchor may be dearer than the best, the saving too high"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        a = self.anchors
        return {
            "deadline": self.deadline,
            "deadline_rule": self.deadline_rule,
            "virtual": point_json(self.virtual),
            "found_by": self.found_by,
            "virtual_search_own": point_json(self.own),
            "best_single": point_json(self.single),
            "best_pair": point_json(self.pair),
            "saving_vs_single": self.saving_vs_single,
            "saving_vs_pair": self.saving_vs_pair,
            "singles": [c.to_json() for c in a.singles],
            "pairs": [c.to_json() for c in a.pairs],
            "anchor_plannings": a.plannings,
            "anchor_search_capped": a.capped,
        }


def saving(virtual: ClusterPoint | None, anchor: ClusterPoint | None) -> float | None:
    """1 - virtual / anchor in cost (0.3: 30% cheaper); None when either is missing."""
    if virtual is None or anchor is None or anchor.cost <= 0:
        return None
    return 1.0 - virtual.cost / anchor.cost


def price(p: ClusterPoint) -> tuple[float, float]:
    return (p.cost, p.makespan)


def point_json(p: ClusterPoint | None) -> dict[str, Any] | None:
    return p.to_json() if p is not None else None


@dataclass(frozen=True)
class VirtualClusterResult:
    frontier: tuple[ClusterPoint, ...]  # non-dominated, by makespan ascending (cost descending)
    chosen: ClusterPoint | None  # None when no cluster found meets the deadline or budget
    rule: str  # how ``chosen`` was picked, or why nothing was
    common_type: str | None  # the one type that can run every step (None if no type can)
    common: ClusterPoint | None  # that type, sized for the deadline (see Comparison)
    comparison: AnchoredComparison | None  # the headline: against the searched anchors
    strawman: Comparison | None  # against the common denominator; flatters (issue 14)
    evaluated: int  # clusters planned
    notes: tuple[str, ...] = ()
    points: tuple[ClusterPoint, ...] = field(default=(), repr=False)  # every cluster planned, in order

    def to_json(self) -> dict[str, Any]:
        c = self.strawman
        return {
            "frontier": [p.to_json() for p in self.frontier],
            "chosen": self.chosen.to_json() if self.chosen else None,
            "rule": self.rule,
            "comparison": self.comparison.to_json() if self.comparison is not None else None,
            "common_type": self.common_type,
            "common": self.common.to_json() if self.common else None,
            "strawman": None
            if c is None
            else {
                "what": "every node the common-denominator type: flatters the saving",
                "deadline": c.deadline,
                "common": c.common.to_json(),
                "virtual": c.virtual.to_json(),
                "saving": c.saving,
            },
            "evaluated": self.evaluated,
            "notes": list(self.notes),
        }

    def render(self) -> str:
        """The frontier (the chosen point marked), the rule, and the comparison, for people."""
        lines = ["clusters on the frontier (renting every node for the whole run):"]
        lines += [f"  {'*' if p == self.chosen else ' '} {p.describe()}" for p in self.frontier]
        lines.append(f"chosen: {self.chosen.describe()} ({self.rule})" if self.chosen else f"none chosen: {self.rule}")
        if self.comparison is not None:
            lines += self.comparison.lines()
        c = self.strawman
        if c is not None:
            lines.append(
                f"strawman, the common denominator ({self.common_type} only), at a deadline of "
                f"{format_duration(c.deadline)}: {c.common.describe()}; the cheapest cluster meeting it "
                f"{c.virtual.describe()} costs {c.saving:.0%} less (this saving flatters: it prices the "
                "type that runs every step, not the cheapest that meets the deadline)"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


# --- the search space -----------------------------------------------------------------------
