"""One candidate cluster, planned: the value the cluster-sizing search (``virtual``) asks
for and the anchor search (``anchors``) compares.  Its own module so that both import it
and neither imports the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hetflow.plan.instance import MachineClass, Plan
from hetflow.spec import format_duration


@dataclass(frozen=True)
class ClusterPoint:
    """One candidate cluster, planned: ``counts`` lists the types it rents (count > 0)."""

    counts: tuple[tuple[str, int], ...]
    makespan: float  # seconds
    cost: float  # dollars: every node rented for the whole makespan
    rate: float  # dollars per hour while it runs
    plan: Plan = field(repr=False, compare=False)

    def count(self, name: str) -> int:
        return dict(self.counts).get(name, 0)

    def classes(self, catalog: Sequence[MachineClass]) -> tuple[MachineClass, ...]:
        """The catalog's types at this point's counts (types not rented left out): the
        cluster to build an instance for and plan with full effort before running."""
        return tuple(dataclasses.replace(c, count=self.count(c.name)) for c in catalog if self.count(c.name))

    def describe(self) -> str:
        nodes = " + ".join(f"{n} x {t}" for t, n in self.counts)
        return f"{nodes}: {format_duration(self.makespan)}, ${self.cost:,.2f}"

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "makespan": self.makespan, "cost": self.cost, "rate": self.rate}
