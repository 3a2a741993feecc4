"""bench.planning.gang's table 2, gang-aware vs replica-by-replica: one event-driven simulation of the
cluster's GPUs, pods bound in queue order to the node with the most free GPUs, each gang run
for the time ``plan.feasible.gangs``' model gives it where its replicas landed."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hetflow.plan.feasible.gangs import allreduce_bytes, link_bandwidth
from hetflow.plan.instance import MachineClass

if TYPE_CHECKING:
    from bench.planning.gang import GangJob


def true_runtime(job: GangJob, classes: Sequence[MachineClass], nodes: int, bandwidth: float) -> float:
    """``plan.feasible.gangs``' model for replicas on ``nodes`` machines of ``classes`` (the slowest
    link of any class the gang touches; two types together: the network between them)."""
    volume = allreduce_bytes(job.replicas, job.comm)
    if volume <= 0:
        return job.compute
    bw = min(link_bandwidth(c, job.replicas, job.gpus, nodes, bandwidth) for c in classes)
    if len({c.name for c in classes}) > 1:
        bw = bandwidth
    return job.compute + volume / bw


@dataclass(frozen=True)
class Online:
    """One event-driven run: what finished, what got stuck, and the GPU time held idle."""

    completed: int
    total: int
    deadlocked: bool
    stuck_gpus: int  # GPUs held for ever by partial gangs (deadlock)
    idle_gpu_hours: float  # held by bound replicas waiting for their peers (until the deadlock)
    makespan: float  # inf when some gang never runs


def pod_queue(jobs: Sequence[GangJob], seed: int) -> list[tuple[int, int]]:
    """(job, replica) pairs interleaved at random: the pods of Jobs created at once."""
    pods = [(j, r) for j, job in enumerate(jobs) for r in range(job.replicas)]
    random.Random(seed).shuffle(pods)
    return pods


def simulate_online(
    jobs: Sequence[GangJob],
    classes: Sequence[MachineClass],
    bandwidth: float,
    pods: Sequence[tuple[int, int]],
    *,
    gang_aware: bool,
    horizon: float = 0.0,
) -> Online:
    """Bind pods in queue order to the node with the most free GPUs (ties: the first node);
    see bench/planning/gang.py's docstring for the two admission rules.  The GPUs of a deadlocked gang
    count as idle until ``horizon`` (or the deadlock, if later): they are held for ever."""
    run = _OnlineRun(jobs, classes, bandwidth)
    order = list(dict.fromkeys(j for j, _r in pods))  # gangs by their first pod in the queue
    pending = list(pods) if not gang_aware else [(j, -1) for j in order]
    while True:
        # in queue order: each binding takes its GPUs before the next pod is tried
        pending = [(j, r) for j, r in pending if not (run.bind_gang(j) if gang_aware else run.bind_pod(j))]
        if not run.events:
            break
        run.finish_next()
    return run.outcome(horizon)


class _OnlineRun:
    """One ``simulate_online`` run's state: free GPUs per node, each job's bound replicas
    (node, since), the finish events, the clock and the GPU time held idle so far."""

    def __init__(self, jobs: Sequence[GangJob], classes: Sequence[MachineClass], bandwidth: float) -> None:
        self.jobs, self.bandwidth = jobs, bandwidth
        self.nodes = [(c, m) for c in classes if c.gpus > 0 for m in c.machine_ids()]
        self.free = [c.gpus for c, _m in self.nodes]
        self.bound: dict[int, list[tuple[int, float]]] = {j: [] for j in range(len(jobs))}  # job -> (node, since)
        self.events: list[tuple[float, int]] = []
        self.now, self.idle, self.done, self.last = 0.0, 0.0, 0, 0.0

    def best_node(self, gpus: int, room: list[int]) -> int | None:
        fits = [k for k in range(len(self.nodes)) if room[k] >= gpus]
        return max(fits, key=lambda k: (room[k], -k)) if fits else None

    def start(self, j: int) -> None:
        job = self.jobs[j]
        held = self.bound[j]
        self.idle += sum(job.gpus * (self.now - since) for _k, since in held)
        where = {k for k, _s in held}
        rt = true_runtime(job, [self.nodes[k][0] for k in where], len(where), self.bandwidth)
        heapq.heappush(self.events, (self.now + rt, j))

    def bind_gang(self, j: int) -> bool:
        """All-or-nothing: every replica of job ``j`` bound now, or none."""
        job = self.jobs[j]
        trial = list(self.free)
        picks = []
        for _ in range(job.replicas):
            k = self.best_node(job.gpus, trial)
            if k is None:
                break
            trial[k] -= job.gpus
            picks.append(k)
        if len(picks) < job.replicas:
            return False
        self.free[:] = trial
        self.bound[j] = [(k, self.now) for k in picks]
        self.start(j)
        return True

    def bind_pod(self, j: int) -> bool:
        """Replica by replica: one pod of job ``j`` bound, holding its GPUs until its peers are."""
        job = self.jobs[j]
        k = self.best_node(job.gpus, self.free)
        if k is None:
            return False
        self.free[k] -= job.gpus
        self.bound[j].append((k, self.now))
        if len(self.bound[j]) == job.replicas:
            self.start(j)
        return True

    def finish_next(self) -> None:
        self.now, j = heapq.heappop(self.events)
        for k, _s in self.bound[j]:
            self.free[k] += self.jobs[j].gpus
        self.done += 1
        self.last = self.now

    def outcome(self, horizon: float) -> Online:
        jobs, bound = self.jobs, self.bound
        stuck = [j for j in range(len(jobs)) if 0 < len(bound[j]) < jobs[j].replicas]
        end = max(self.now, horizon)
        held_idle = sum(jobs[j].gpus * (end - since) for j in stuck for _k, since in bound[j])
        stuck_gpus = sum(jobs[j].gpus * len(bound[j]) for j in stuck)
        return Online(
            completed=self.done,
            total=len(jobs),
            deadlocked=bool(stuck),
            stuck_gpus=stuck_gpus,
            idle_gpu_hours=(self.idle + held_idle) / 3600.0,
            makespan=self.last if self.done == len(jobs) else math.inf,
        )
