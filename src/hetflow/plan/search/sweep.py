"""The list pass's sweep over the busy machines of one class, for a plain demand.

When no machine of a class is free from a task's ready time on, the pass asks every touched
machine for its earliest start and keeps the best (``ListPass.scan``).  On a big cluster
that is most of the planner's work, so for the common demand (no GPU, a run time above
zero) the sweep is done here in one loop over the machines' blocked runs
(``MachineTimeline.blocked``): per machine a bisection and a jump over each run too full
for the task, the same answer ``MachineTimeline.earliest_start`` gives, without a call per
machine.  Machines of one class have one capacity, so one key serves all of them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Container

from hetflow.plan.search.compiled import Choice
from hetflow.plan.search.score import Candidate
from hetflow.plan.search.timeline import MachineTimeline


def plain(ch: Choice) -> bool:
    """Whether ``sweep`` answers for ``ch``: whole GPUs or none, of any index (no slot), no
    gang, a run time above zero."""
    return ch.slot is None and not ch.gang and ch.runtime > 0.0


def sweep(
    tls: list[MachineTimeline],
    machines: range,
    skip: Container[int],
    ch: Choice,
    flag: int,
    ready: float,
    best: Candidate | None,
) -> tuple[Candidate | None, int]:
    """The best of ``best`` and ``ch`` started at or after ``ready`` on each machine of
    ``machines`` not in ``skip``, tried in order (ties: the lower machine), stopping once no
    machine left can beat ``best``; and how many machines were searched.  Candidates compare
    as in ``plan.search.score``; ``ch`` must be ``plain``."""
    if not machines:
        return best, 0
    rt, k, gpus = ch.runtime, ch.index, ch.gpus
    head = tls[machines[0]]
    key = head.room(ch.cores, ch.memory, gpus)
    limit = best[0] if best is not None else float("inf")
    lower = ready + rt
    probes = 0
    inf = float("inf")
    for m in machines:
        if best is not None and (lower > limit or (lower == limit and (flag, m, k) > best[1:4])):
            break
        if m in skip:
            continue
        probes += 1
        tl = tls[m]
        found = tl.runs.get(key)
        starts, ends = found if found is not None else tl.blocked(key)
        i = bisect_right(ends, ready)  # the first run too full for ch that ends after ready
        count = len(starts)
        t = ready
        while True:
            while i < count and starts[i] < t + rt:
                t = ends[i]
                i += 1
            if gpus == 0 or t + rt > limit:
                break
            # The counts fit; do the GPUs, index by index (``MachineTimeline.gpu_retry``)?
            later = tl.gpu_retry(t, t + rt, gpus)
            if later is None:
                break
            t = later
            if t == inf:  # no GPU of the kind asked for on this machine
                break
            i = bisect_right(ends, t)
        if t == inf or t + rt > limit:
            continue
        cand = (t + rt, flag, m, k, t, ch)
        if best is None or cand < best:
            best, limit = cand, t + rt
    return best, probes


class Tails:
    """Per class, the earliest time after which some touched machine is empty (its timeline's
    last breakpoint), so that a pass looks for an empty machine only when one can be there.
    Tails only grow, so the least changes only when the machine that held it is booked."""

    def __init__(self, tls: list[MachineTimeline], classes: int) -> None:
        self.tls = tls
        self.known: list[float | None] = [None] * classes

    def least(self, c: int, touched: range) -> float:
        """The least tail of ``touched``, the machines of class ``c`` that a pass has used."""
        least = self.known[c]
        if least is None:
            least = min((self.tls[m].times[-1] for m in touched), default=float("inf"))
            self.known[c] = least
        return least

    def booking(self, c: int, m: int | None) -> None:
        """Call before booking machine ``m`` of class ``c`` (None: some machines of it, or a
        release): forgets the least tail when the booking may change it."""
        least = self.known[c]
        if least is not None and (m is None or self.tls[m].times[-1] <= least):
            self.known[c] = None
