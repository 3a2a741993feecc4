"""One pass of the list scheduler, and the schedules it builds.

``Schedule``: per task its choice, machine, start and GPUs.  ``build_fixed``: a schedule
from given assignments and an order.  Gangs are placed whole (``earliest_gang``,
``reserve_gang``): every replica at once, on machines of one class.  ``ListPass``: one pass
of list scheduling over ``Compiled`` machine timelines, with a ``Rule`` that picks among
each task's candidates (see ``Rule``); ``heuristic.py`` runs the passes.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from hetflow.errors import HetflowError
from hetflow.plan.search.compiled import Choice, Compiled
from hetflow.plan.search.ready import ReadyTimes
from hetflow.plan.search.score import Candidate, Rule, score_for
from hetflow.plan.search.sweep import Tails, plain, sweep
from hetflow.plan.search.timeline import MachineTimeline


@dataclass
class Schedule:
    """A complete schedule: per task its choice, machine, start and GPU indices."""

    choice: list[Choice]
    machine: list[int]
    start: list[float]
    finish: list[float]
    gpus: list[tuple[int, ...]]
    # per task: () for one container, else one (machine, GPU indices) per replica, rank 0 first
    ranks: list[tuple[tuple[int, tuple[int, ...]], ...]] = field(default_factory=list)
    # per task: its MIG instance's index on GPU gpus[0], or None (empty: none anywhere)
    mig: list[int | None] = field(default_factory=list)

    def mig_of(self, t: int) -> int | None:
        return self.mig[t] if self.mig else None

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.choice)

    def start_order(self, tiebreak: list[int]) -> list[int]:
        """Tasks by start time (ties by ``tiebreak``): a topological order that rebuilds this schedule."""
        return sorted(range(len(self.start)), key=lambda t: (self.start[t], tiebreak[t]))


def pass_key(rule: Rule, priority: Sequence[float], tiebreak: Sequence[int] | None) -> tuple[object, ...]:
    """What decides a ``ListPass``'s schedule on a problem: its rule and the order its
    priorities put the tasks in (the heap's: priority, ``tiebreak``, index), with their ties.
    A pass compares priorities only with each other (the heap; the lookahead's critical
    child), so two passes of equal keys build the same schedule (issue 43: a 10,000-step
    workflow's mean-transfer ranks order its tasks as the upward ranks do)."""
    tb = range(len(priority)) if tiebreak is None else tiebreak
    order = sorted(range(len(priority)), key=lambda t: (-priority[t], tb[t], t))
    ties = bytes(priority[a] == priority[b] for a, b in pairwise(order))
    return (rule, tuple(order), ties)


def build_fixed(problem: Compiled, order: list[int], choice: list[Choice], machine: list[int]) -> Schedule:
    """Place each task, in ``order``, at the earliest fitting start on its given machine."""
    n = problem.n
    tls = problem.timelines()
    start = [0.0] * n
    finish = [0.0] * n
    gpus: list[tuple[int, ...]] = [()] * n
    ranks: list[tuple[tuple[int, tuple[int, ...]], ...]] = [()] * n
    mig: list[int | None] = [None] * n
    machine = list(machine)
    parents = problem.parents
    for t in order:
        m = machine[t]
        ch = choice[t]
        ready = 0.0
        for p, comm in parents[t]:
            r = finish[p] if machine[p] == m and not ch.gang else finish[p] + comm
            if r > ready:
                ready = r
        if ch.gang:
            c = ch.cls
            pool = range(problem.first[c], problem.first[c] + problem.count[c])
            found = earliest_gang(tls, ch, pool, ready, math.inf)
            if found is None:
                raise HetflowError(f"gang {problem.names[t]!r} does not fit class {problem.classes[c].name!r}")
            s, f, alloc = found
            start[t], finish[t] = s, f
            ranks[t] = reserve_gang(tls, ch, alloc, s, f)
            machine[t], gpus[t] = ranks[t][0]
            continue
        tl = tls[m]
        s = tl.earliest_start(ready, ch.runtime, ch.cores, ch.memory, ch.gpus, slot=ch.slot)
        if s == math.inf:
            raise HetflowError(f"task {problem.names[t]!r} never fits machine {problem.machine_name[m]!r}")
        start[t] = s
        finish[t] = s + ch.runtime
        gpus[t], mig[t] = reserve_one(tl, ch, s, s + ch.runtime)
    return Schedule(list(choice), machine, start, finish, gpus, ranks, mig)


def reserve_one(tl: MachineTimeline, ch: Choice, start: float, finish: float) -> tuple[tuple[int, ...], int | None]:
    """Book one container's choice on ``tl``: (GPU indices, MIG instance or None)."""
    slot = ch.slot
    if slot is not None and slot.sliced:
        return tl.reserve_slot(start, finish, ch.cores, ch.memory, slot)
    return tl.reserve(start, finish, ch.cores, ch.memory, ch.gpus, None if slot is None else slot.only), None


def release_one(
    tl: MachineTimeline, ch: Choice, start: float, finish: float, gpus: tuple[int, ...], mig: int | None
) -> None:
    """Undo ``reserve_one``."""
    if ch.slot is not None and ch.slot.sliced:
        tl.release_slot(start, finish, ch.cores, ch.memory, gpus[0], ch.slot, mig)
    else:
        tl.release(start, finish, ch.cores, ch.memory, gpus)


# --- gangs: every replica placed at once ----------------------------------------------------

Alloc = list[tuple[int, int]]  # (machine, replicas there)


def _holds(tl: MachineTimeline, ch: Choice, start: float, duration: float, most: int) -> int:
    """How many replicas (at most ``most``) fit ``tl`` during ``[start, start + duration)``."""
    for k in range(most, 0, -1):
        end = start + duration
        if tl.earliest_start(start, duration, k * ch.cores, k * ch.memory, k * ch.gpus, end, ch.slot) == start:
            return k
    return 0


def _gang_at(tls: list[MachineTimeline], ch: Choice, pool: Sequence[int], start: float) -> tuple[float, Alloc] | None:
    """A way to hold every replica from ``start`` on: one machine if one can (shorter: no
    network in the ring), else the fewest machines, fullest first; with its run time."""
    n = ch.replicas
    if ch.per_node >= n:
        d1 = ch.runtime + ch.comm1
        for m in pool:
            if _holds(tls[m], ch, start, d1, n) == n:
                return d1, [(m, n)]
    dn = ch.runtime + ch.comm_n
    caps = [(k, m) for m in pool if (k := _holds(tls[m], ch, start, dn, ch.per_node)) > 0]
    caps.sort(key=lambda km: (-km[0], km[1]))
    alloc: Alloc = []
    left = n
    for k, m in caps:
        take = min(k, left)
        alloc.append((m, take))
        left -= take
        if left == 0:
            return (ch.runtime + ch.comm1 if len(alloc) == 1 else dn), alloc
    return None


def earliest_gang(
    tls: list[MachineTimeline], ch: Choice, pool: Sequence[int], ready: float, limit: float
) -> tuple[float, float, Alloc] | None:
    """The earliest start ``>= ready`` at which the whole gang fits on machines of ``pool``
    (start, finish, allocation), or None when it cannot finish by ``limit``.  Only the times
    at which some machine's use changes can open room, so only those are tried."""
    times = sorted({ready, *(x for m in pool for x in tls[m].times if x > ready)})
    shortest = ch.runtime + min(ch.comm1, ch.comm_n)
    for t in times:
        if t + shortest > limit:
            return None
        found = _gang_at(tls, ch, pool, t)
        if found is not None:
            d, alloc = found
            return (t, t + d, alloc) if t + d <= limit else None
    return None


def reserve_gang(
    tls: list[MachineTimeline], ch: Choice, alloc: Alloc, start: float, finish: float
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Book an allocation; one (machine, GPU indices) per replica, in rank order."""
    ranks: list[tuple[int, tuple[int, ...]]] = []
    for m, k in alloc:
        got = tls[m].reserve(start, finish, k * ch.cores, k * ch.memory, k * ch.gpus, ch.slot.only if ch.slot else None)
        g = ch.gpus
        ranks += [(m, got[i * g : (i + 1) * g]) for i in range(k)]
    return tuple(ranks)


def release_gang(
    tls: list[MachineTimeline], ch: Choice, ranks: Sequence[tuple[int, tuple[int, ...]]], start: float, finish: float
) -> None:
    per: dict[int, list[int]] = {}
    for m, gpus in ranks:
        per.setdefault(m, []).extend(gpus)
    for m, held in per.items():
        k = sum(1 for mm, _ in ranks if mm == m)
        tls[m].release(start, finish, k * ch.cores, k * ch.memory, tuple(held))


# --- one list-scheduling pass ---------------------------------------------------------------


class ListPass:
    """One pass of the list scheduler: tasks in priority order, each placed by ``rule``."""

    def __init__(
        self, problem: Compiled, rule: Rule, priority: list[float], tiebreak: Sequence[int] | None = None
    ) -> None:
        self.problem = problem
        self.rule = rule
        self.priority = priority
        # among ready tasks of equal priority, the lowest ``tiebreak`` goes first (default: task order)
        self.tiebreak: Sequence[int] = range(problem.n) if tiebreak is None else tiebreak
        self.tls = problem.timelines()
        n = problem.n
        self.done = [False] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.machine = [-1] * n
        self.choice: list[Choice | None] = [None] * n
        self.gpus: list[tuple[int, ...]] = [()] * n
        self.ranks: list[tuple[tuple[int, tuple[int, ...]], ...]] = [()] * n
        self.mig: list[int | None] = [None] * n
        self.allocs: dict[tuple[int, float], Alloc] = {}  # a gang candidate's machines, by (choice id, start)
        self.next_idle = [0] * len(problem.classes)  # machines first[c] + next_idle[c] ... are untouched
        self.tails = Tails(self.tls, len(problem.classes))
        self.by_runtime = problem.by_runtime
        self.min_cost = problem.min_cost
        self.probes = 0  # machine timelines searched: the pass's work, counted without a clock
        self.spent = 0.0
        self.cheapest_left = sum(self.min_cost)
        self.weight_left = sum(rule.weight)
        self.ready = ReadyTimes(problem.children)  # kept as parents are placed: no rescans

    def run(self) -> Schedule:
        problem = self.problem
        indeg = [len(ps) for ps in problem.parents]
        tb = self.tiebreak
        heap = [(-self.priority[t], tb[t], t) for t in range(problem.n) if indeg[t] == 0]
        heapq.heapify(heap)
        placed = 0
        while heap:
            _, _, t = heapq.heappop(heap)
            self.place(t, self.pick(t))
            placed += 1
            for c, _comm in problem.children[t]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    heapq.heappush(heap, (-self.priority[c], tb[c], c))
        if placed != problem.n:
            raise HetflowError("the instance's edges form a cycle; a workflow must be a DAG")
        choice = [ch for ch in self.choice if ch is not None]
        return Schedule(choice, self.machine, self.start, self.finish, self.gpus, self.ranks, self.mig)

    def place(self, t: int, cand: Candidate) -> None:
        finish, _flag, m, _k, start, ch = cand
        self.done[t] = True
        self.start[t] = start
        self.finish[t] = finish
        self.machine[t] = m
        self.choice[t] = ch
        self.ready.placed(t, m, finish)
        c = ch.cls
        self.tails.booking(c, None if ch.gang else m)
        if ch.gang:
            alloc = self.allocs[(id(ch), start)]
            self.ranks[t] = reserve_gang(self.tls, ch, alloc, start, finish)
            self.gpus[t] = self.ranks[t][0][1]
            top = max(mm for mm, _ in alloc) - self.problem.first[c] + 1
            self.next_idle[c] = max(self.next_idle[c], top)
        else:
            self.gpus[t], self.mig[t] = reserve_one(self.tls[m], ch, start, finish)
            if m == self.problem.first[c] + self.next_idle[c]:
                self.next_idle[c] += 1
        self.spent += ch.cost
        self.cheapest_left -= self.min_cost[t]
        if self.rule.weight:
            self.weight_left -= self.rule.weight[t]

    def unplace(self, t: int, idle_before: int) -> None:
        ch = self.choice[t]
        assert ch is not None
        if ch.gang:
            release_gang(self.tls, ch, self.ranks[t], self.start[t], self.finish[t])
            self.ranks[t] = ()
        else:
            release_one(self.tls[self.machine[t]], ch, self.start[t], self.finish[t], self.gpus[t], self.mig[t])
            self.mig[t] = None
        self.next_idle[ch.cls] = idle_before
        self.tails.booking(ch.cls, None)
        self.done[t] = False
        self.choice[t] = None
        self.ready.undo()
        self.spent -= ch.cost
        self.cheapest_left += self.min_cost[t]
        if self.rule.weight:
            self.weight_left += self.rule.weight[t]

    # --- choosing -----------------------------------------------------------------------

    def pick(self, t: int) -> Candidate:
        """The rule's score plugin picks (``plan.search.score``)."""
        return score_for(self.rule.kind).pick(self, t)

    def allowed(self, cands: list[Candidate]) -> list[Candidate]:
        """gpu_policy "avoid": a task that uses no GPU goes to a GPU node only if that makes it
        finish strictly earlier than on the best node without GPUs."""
        if not self.rule.avoid:
            return cands
        classes = self.problem.classes
        no_gpu = [c[0] for c in cands if classes[c[5].cls].gpus == 0]
        if not no_gpu:
            return cands
        best = min(no_gpu)
        return [c for c in cands if not c[5].cpu_on_gpu or c[0] < best]

    def child_finish(self, t: int, cand: Candidate) -> float:
        """The earliest finish of ``t``'s most critical child if ``t`` is placed as ``cand``."""
        children = self.problem.children[t]
        if not children:
            return cand[0]
        child = max(children, key=lambda e: (self.priority[e[0]], -e[0]))[0]
        idle_before = self.next_idle[cand[5].cls]
        self.ready.mark()
        self.place(t, cand)
        try:
            return self.earliest(child)[0]
        finally:
            self.unplace(t, idle_before)

    def earliest(self, t: int) -> Candidate:
        """The candidate that finishes first (ties: see ``Candidate``)."""
        remote, near = self.ready_times(t)
        lowest = min(near.values(), default=remote)
        best: Candidate | None = None
        for ch in self.by_runtime[t]:
            if best is not None and min(lowest, remote) + ch.runtime > best[0]:
                break  # sorted by run time: no later option can finish earlier
            best = self.scan(ch, remote, near, best)
        assert best is not None
        return best

    def per_choice(self, t: int) -> list[Candidate]:
        remote, near = self.ready_times(t)
        out = []
        for ch in self.problem.choices[t]:
            best = self.scan(ch, remote, near, None)
            assert best is not None
            out.append(best)
        return out

    def ready_times(self, t: int) -> tuple[float, dict[int, float]]:
        """When the inputs of ``t`` can be on a machine that holds none of its parents, and on
        each machine that holds some (those inputs need no transfer).  Unplaced parents are
        ignored (the lookahead asks about a child before its other parents are placed)."""
        return self.ready.of(t)

    def scan(self, ch: Choice, remote: float, near: dict[int, float], best: Candidate | None) -> Candidate | None:
        """The best of ``best`` and ``ch`` on each machine of its class.

        Machines of a class that nothing has touched yet are identical and idle: one stands
        for all (STYLE.md, node classes).  The machines that hold a parent come first (their
        data needs no transfer); then, if a machine is free from the ready time on, the task
        can do no better in this class; else every machine is tried in order and the scan
        stops as soon as none can beat ``best``."""
        if ch.gang:
            return self.scan_gang(ch, remote, near, best)
        problem, tls = self.problem, self.tls
        c, rt = ch.cls, ch.runtime
        flag = 1 if self.rule.avoid and ch.cpu_on_gpu else 0
        k = ch.index
        limit = best[0] if best is not None else math.inf
        first = problem.first[c]
        for m, ready in near.items():
            if problem.machine_class[m] != c:
                continue
            s = tls[m].earliest_start(ready, rt, ch.cores, ch.memory, ch.gpus, limit, ch.slot)
            self.probes += 1
            if s != math.inf:
                cand = (s + rt, flag, m, k, s, ch)
                if best is None or cand < best:
                    best, limit = cand, s + rt
        lower = remote + rt
        if best is not None and (lower > limit or (lower == limit and (flag, first, k) > best[1:4])):
            return best
        end = first + self.next_idle[c]
        # The lower bound is reached on a machine with nothing left to run after the ready
        # time, or on an untouched one: take the first such, without looking for a busier
        # machine that might tie (that search is what makes a big cluster slow).
        if self.tails.least(c, range(first, end)) <= remote:
            for m in range(first, end):
                if tls[m].times[-1] <= remote and m not in near:
                    quick = (lower, flag, m, k, remote, ch)
                    return quick if best is None or quick < best else best
        if end < first + problem.count[c]:
            quick = (lower, flag, end, k, remote, ch)
            return quick if best is None or quick < best else best
        if plain(ch):
            best, probes = sweep(tls, range(first, end), near, ch, flag, remote, best)
            self.probes += probes
            return best
        for m in range(first, end):
            if best is not None and (lower > limit or (lower == limit and (flag, m, k) > best[1:4])):
                break
            if m in near:
                continue
            s = tls[m].earliest_start(remote, rt, ch.cores, ch.memory, ch.gpus, limit, ch.slot)
            self.probes += 1
            if s != math.inf:
                cand = (s + rt, flag, m, k, s, ch)
                if best is None or cand < best:
                    best, limit = cand, s + rt
        return best

    def scan_gang(self, ch: Choice, remote: float, near: dict[int, float], best: Candidate | None) -> Candidate | None:
        """The best of ``best`` and the gang's earliest finish on its class.  Every replica
        needs the inputs, so the gang is ready when they can be on every machine.  The
        machines tried are the class's touched ones and as many untouched ones (all alike)
        as the gang could use."""
        problem = self.problem
        c = ch.cls
        first = problem.first[c]
        pool = range(first, first + min(problem.count[c], self.next_idle[c] + ch.replicas))
        ready = max([remote, *near.values()])
        limit = best[0] if best is not None else math.inf
        self.probes += len(pool)
        found = earliest_gang(self.tls, ch, pool, ready, limit)
        if found is None:
            return best
        start, finish, alloc = found
        self.allocs[(id(ch), start)] = alloc
        cand = (finish, 1 if self.rule.avoid and ch.cpu_on_gpu else 0, alloc[0][0], ch.index, start, ch)
        return cand if best is None or cand < best else best
