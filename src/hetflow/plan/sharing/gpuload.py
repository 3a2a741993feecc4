"""One GPU's shared tenants over time, as a step function (for ``timeline``).

Kept as sorted breakpoints like a machine's cores: ``times[i]`` starts a segment lasting
until ``times[i + 1]`` (the last one is empty and lasts for ever), with the number of
tenants, the sum of their shares (the GPU's *load*) and the lowest load any of them was
planned at.  A tenant of share ``s`` planned at load ``L`` fits a window when, in every
segment of it, the segment's tenants with it pass ``model.sharing_refusal`` (one more
tenant within ``replicas``, ``load + s`` within ``L`` and within the segment's lowest
planned load); a segment that breaks this can be passed only by starting at its end, which
is the retry (as for cores).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

from hetflow.plan.model.fit import LOAD, sharing_refusal

Tenant = tuple[float, float, float, float]  # start, finish, share, planned load


def split_at(times: list[float], x: float, *columns: list[Any]) -> int:
    """Make ``x`` a breakpoint of a step function kept as sorted ``times`` (the first at or
    before every query) and parallel ``columns`` of values per segment: the segment holding
    ``x`` is cut in two with the same values.  Returns the index of the segment starting at
    ``x``.  (``GpuLoad`` and ``timeline.Timeline`` keep their capacity this way.)"""
    i = bisect_right(times, x) - 1
    if times[i] == x:
        return i
    times.insert(i + 1, x)
    for column in columns:
        column.insert(i + 1, column[i])
    return i + 1


class GpuLoad:
    """The tenants of one GPU: their count, load and lowest planned load per segment."""

    __slots__ = ("count", "load", "low", "tenants", "times")

    def __init__(self) -> None:
        self.times: list[float] = [0.0]
        self.count: list[int] = [0]
        self.load: list[float] = [0.0]
        self.low: list[float] = [math.inf]
        self.tenants: list[Tenant] = []

    def __bool__(self) -> bool:
        return bool(self.tenants)

    def busy_until(self, start: float, end: float) -> float | None:
        """None when no tenant overlaps ``[start, end)``, else the end of the last segment
        with a tenant in it: any window starting earlier still meets that tenant."""
        times, count = self.times, self.count
        i = bisect_right(times, start) - 1
        last = None
        while i < len(times) and times[i] < end:
            if count[i]:
                last = times[i + 1]
            i += 1
        return last

    def blocked(self, start: float, end: float, share: float, level: float, replicas: int) -> float | None:
        """None when a tenant (``share``, planned at ``level``) fits during ``[start, end)``,
        else the earliest start worth trying again (inf: never)."""
        if sharing_refusal(1, share, level, replicas) == LOAD:
            return math.inf  # too big at its own level even alone
        times, count, load, low = self.times, self.count, self.load, self.low
        i = bisect_right(times, start) - 1
        n = len(times)
        while i < n and times[i] < end:
            lowest = low[i] if low[i] < level else level
            if sharing_refusal(count[i] + 1, load[i] + share, lowest, replicas) is not None:
                return times[i + 1]
            i += 1
        return None

    def add(self, tn: Tenant) -> None:
        start, finish, share, level = tn
        a, b = self._split(start), self._split(finish)
        for k in range(a, b):
            self.count[k] += 1
            self.load[k] += share
            if level < self.low[k]:
                self.low[k] = level
        self.tenants.append(tn)

    def remove(self, tn: Tenant) -> None:
        self.tenants.remove(tn)
        start, finish, share, _ = tn
        a, b = bisect_left(self.times, start), bisect_left(self.times, finish)
        for k in range(a, b):
            self.count[k] -= 1
            self.load[k] -= share
            t = self.times[k]
            self.low[k] = min((x[3] for x in self.tenants if x[0] <= t < x[1]), default=math.inf)

    def _split(self, x: float) -> int:
        return split_at(self.times, x, self.count, self.load, self.low)
