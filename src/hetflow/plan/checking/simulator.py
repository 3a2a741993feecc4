"""Replay a plan in a discrete-event simulation with noisy run times.

A plan is a promise made with estimates; ``simulate`` asks what happens when the estimates
are off.  It keeps everything the plan decided (machine, variant, GPU indices, and the order
of the steps on each machine) and lets time be decided by events: a step starts when the
steps planned before it on its machine have started, its parents' data have arrived
(``bytes / bandwidth`` between two machines, nothing on one: the DAG's one data-arrival
rule, ``eventsim.Dag.data_ready``), and its cores, memory and GPUs are free (``model.fits``,
asked by the machine now, ``model.Machine``).  Each run time is its estimate times a
factor drawn uniformly within ``±noise`` from ``random.Random(seed)``, one draw per task in
the instance's order, so the same seed gives the same run (STYLE.md habit 1: no clock,
seeded randomness).  The replay is a policy over the baselines' event loop
(``eventsim.EventLoop``), events within ``_EPS`` of each other being one instant.

With ``noise=0`` a valid plan's steps never start later than planned (the steps running at
a planned start in the simulation are a subset of those running then in the plan), so the
simulated makespan is at most the planned one, and equal for plans without idle gaps that
could be closed (list-scheduling plans).

Slices of GPUs are held as planned and enforced like cores: a shared tenant starts only
when its GPU is not held whole, fewer than ``replicas`` tenants are on it, and the shares
on it stay within the load it was planned at (MPS: within 1; ``plan.sharing.sharecheck``); a MIG
step only when its instance is free.  A time-sliced tenant's run time is its planned one
(the solo time slowed by the load it was planned at), times its noise factor.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hetflow.errors import NoFitError
from hetflow.plan.baselines.eventsim import EventLoop
from hetflow.plan.cost import plan_cost
from hetflow.plan.feasible.gangs import gang_runtime, machine_shares
from hetflow.plan.instance import Instance, Placement, Plan, placed_option
from hetflow.plan.model.fit import Demand
from hetflow.plan.model.machine import Machine, placed
from hetflow.plan.sharing.sharecheck import planned_load
from hetflow.spec import format_duration

_EPS = 1e-9


@dataclass(frozen=True)
class ClassUtilization:
    """How busy a machine class was over the simulated makespan.

    ``cpu`` is busy core-seconds / (cores x count x makespan); ``gpu`` the same for GPUs
    (None for a class without GPUs).  Both lie in [0, 1]."""

    machine_class: str
    cpu: float
    gpu: float | None = None


@dataclass(frozen=True)
class SimulationResult:
    makespan: float
    cost: float  # dollars, by plan.cost.plan_cost: each step's runtime x price x dominant share
    utilization: Mapping[str, ClassUtilization]
    plan: Plan  # the simulated placements, drawable with report.gantt
    planned_makespan: float
    planned_cost: float
    noise: float
    seed: int
    runtime_factors: Mapping[str, float] = field(default_factory=dict, repr=False)

    @property
    def slowdown(self) -> float:
        """Simulated makespan / planned makespan (1.0 when both are zero)."""
        if self.planned_makespan <= 0:
            return 1.0
        return self.makespan / self.planned_makespan

    def to_json(self) -> dict[str, Any]:
        return {
            "makespan": self.makespan,
            "planned_makespan": self.planned_makespan,
            "slowdown": self.slowdown,
            "cost": self.cost,
            "planned_cost": self.planned_cost,
            "noise": self.noise,
            "seed": self.seed,
            "utilization": {u.machine_class: {"cpu": u.cpu, "gpu": u.gpu} for u in self.utilization.values()},
            "placements": [dataclasses.asdict(p) for p in self.plan.placements.values()],
        }

    def render(self) -> str:
        """A few lines for people: simulated vs planned, and how busy each class was."""
        lines = [
            f"simulated makespan {format_duration(self.makespan)} (planned {format_duration(self.planned_makespan)}, "
            f"x{self.slowdown:.2f}); cost ${self.cost:,.2f} (planned ${self.planned_cost:,.2f})",
            f"run times within ±{self.noise:.0%} of the estimates, seed {self.seed}",
            "utilization:",
        ]
        for u in self.utilization.values():
            gpu = f", GPUs {u.gpu:.0%}" if u.gpu is not None else ""
            lines.append(f"  {u.machine_class}: cores {u.cpu:.0%}{gpu}")
        return "\n".join(lines)


def utilization(
    instance: Instance, placements: Mapping[str, Placement], makespan: float
) -> dict[str, ClassUtilization]:
    """Busy fraction per machine class over ``makespan`` (see ClassUtilization)."""
    core_s: dict[str, float] = {c.name: 0.0 for c in instance.classes}
    gpu_s: dict[str, float] = {c.name: 0.0 for c in instance.classes}
    for p in placements.values():
        cls = instance.machine_class(p.machine_class)
        cores = float(cls.cores) if instance.one_task_per_machine else p.cores
        replicas = max(1, len(p.ranks))
        core_s[cls.name] += cores * replicas * (p.finish - p.start)
        gpu_s[cls.name] += len(p.gpus) * replicas * (p.finish - p.start)
    out: dict[str, ClassUtilization] = {}
    for c in instance.classes:
        cpu_cap = c.cores * c.count * makespan
        gpu_cap = c.gpus * c.count * makespan
        cpu = min(1.0, core_s[c.name] / cpu_cap) if cpu_cap > 0 else 0.0
        gpu = (min(1.0, gpu_s[c.name] / gpu_cap) if gpu_cap > 0 else 0.0) if c.gpus else None
        out[c.name] = ClassUtilization(c.name, cpu, gpu)
    return out


def _runtime_factors(instance: Instance, noise: float, seed: int) -> dict[str, float]:
    # One draw per task in the instance's (topological) order, before anything runs, so a
    # task's factor does not depend on the order events happen in.
    rng = random.Random(seed)
    return {t.name: 1.0 + noise * (2.0 * rng.random() - 1.0) for t in instance.tasks}


def _estimate(instance: Instance, p: Placement) -> float:
    task = instance.task(p.task)
    o = placed_option(instance.task(p.task).options, p)
    if o is not None and o.share > 0:
        return max(o.runtime, p.finish - p.start)  # the planned load's slowdown included
    if o is not None:
        return gang_runtime(instance, task, o, len(p.per_machine()))
    raise ValueError(
        f"plan puts {p.task!r} as variant {p.variant!r} on class {p.machine_class!r}, "
        "which is not one of its options in this instance"
    )


@dataclass
class _Queue:
    """One machine of the replay: the machine now and its steps in planned start order."""

    machine: Machine
    queue: list[str]  # task names in planned start order
    next: int = 0
    wake: float = -1.0  # the wake-up already asked for the head's data, to ask for it once
    holds: dict[str, Demand] = field(default_factory=dict)  # what each of its steps holds here


def _queues(
    instance: Instance, planned: Mapping[str, Placement], order: Mapping[str, int], by_id: Mapping[str, Machine]
) -> tuple[dict[str, _Queue], dict[str, dict[str, Placement]]]:
    """Every machine the plan uses with its steps in planned start order, and what each step
    holds on each machine: one share for a container, one per machine for a gang, which is
    queued on every machine it uses and starts on all of them at once."""
    machines: dict[str, _Queue] = {}
    shares: dict[str, dict[str, Placement]] = {}
    one_task = instance.one_task_per_machine
    for name in sorted(order, key=lambda n: (planned[n].start, order[n])):
        p = planned[name]
        shares[name] = {sh.machine: sh for sh in machine_shares(p)}
        cls = instance.machine_class(p.machine_class)
        o = placed_option(instance.task(p.task).options, p)
        level = planned_load(p, o, cls) if p.share > 0 and o is not None else 1.0
        for mid, sh in shares[name].items():
            if mid not in machines:
                if mid not in cls.machine_ids():
                    raise ValueError(f"plan puts {name!r} on {mid!r}, which class {cls.name!r} does not have")
                machines[mid] = _Queue(by_id[mid], [])
            machines[mid].queue.append(name)
            cores, memory = (1.0, 0) if one_task else (sh.cores, sh.memory)
            machines[mid].holds[name] = placed(sh, cores, memory, level, cls.gpu_sharing.mode)
    return machines, shares


class _Replay:
    """One replay of a plan (``simulate``), a policy over ``eventsim.EventLoop``: each
    machine's queue in planned order, a head started once its inputs are there
    (``Dag.data_ready``) and what it holds fits (``Machine.fits``)."""

    def __init__(self, instance: Instance, planned: Mapping[str, Placement], runtime: Mapping[str, float]) -> None:
        self.loop = EventLoop(instance, tolerance=_EPS)
        self.planned, self.runtime = planned, runtime
        self.order = self.loop.dag.order
        self.machines, self.shares = _queues(instance, planned, self.order, self.loop.by_id)
        self.tie = 0  # events at one time in the order they were asked for

    def arrival(self, name: str) -> float | None:
        """When the last input of ``name`` is on its machine; None while a parent runs."""
        if self.loop.dag.missing[name]:
            return None
        return self.loop.dag.data_ready(name, self.planned[name].machine, 0.0, self.loop.placements)

    def gang_ready(self, name: str, mid: str) -> bool:
        """A gang at the head of ``mid``'s queue starts only when it heads every queue it is
        in and fits on every machine: all replicas at once (nothing held while waiting)."""
        for other in self.shares[name]:
            if other == mid:
                continue
            om = self.machines[other]
            if om.next >= len(om.queue) or om.queue[om.next] != name or not om.machine.fits(om.holds[name]):
                return False
        return True

    def start_heads(self, mid: str) -> bool:
        """Start, now, the steps at the head of ``mid``'s queue that can; True if any did."""
        m, now = self.machines[mid], self.loop.now
        any_started = False
        while m.next < len(m.queue):
            name = m.queue[m.next]
            ready = self.arrival(name)
            if ready is None or not m.machine.fits(m.holds[name]):
                break
            if len(self.shares[name]) > 1 and not self.gang_ready(name, mid):
                break
            if ready > now + _EPS:
                if m.wake != ready:
                    m.wake = ready
                    self.tie += 1
                    self.loop.wake(ready, self.tie)
                break
            held = []
            for other in self.shares[name]:
                q = self.machines[other]
                held.append((q.machine, q.holds[name], q.machine.take(q.holds[name], name)))
                q.next += 1
            self.tie += 1
            started = dataclasses.replace(self.planned[name], start=now, finish=now + self.runtime[name])
            self.loop.hold(started, held, self.tie)
            any_started = True
        return any_started

    def schedule(self) -> None:
        """Sweep until nothing more starts now: a gang that starts on a later machine of the
        sweep may uncover, on an earlier one, a step that was queued behind it."""
        progress = True
        while progress:
            progress = False
            for mid in sorted(self.machines):
                progress |= self.start_heads(mid)

    def finished(self, name: str) -> None:
        """A step ends at the instant its finish event is taken (events within ``_EPS`` are one)."""
        self.loop.placements[name] = dataclasses.replace(self.loop.placements[name], finish=self.loop.now)

    def stuck(self) -> str:
        never = sorted(set(self.order) - set(self.loop.placements), key=self.order.__getitem__)
        return (
            f"the plan cannot run in its own order: {', '.join(never[:5])} never start "
            "(a step is planned to start before its parent on the same machine)"
        )

    def run(self) -> dict[str, Placement]:
        """Every step as it ran, in the instance's order; ValueError when some never start."""
        try:
            done = self.loop.run(self.schedule, lambda _child: None, self.stuck, finished=self.finished)
        except NoFitError as e:
            raise ValueError(str(e)) from None
        return {name: done[name] for name in self.order}


def simulate(instance: Instance, plan: Plan, *, noise: float = 0.2, seed: int = 0) -> SimulationResult:
    """Run ``plan`` on ``instance`` with run times drawn within ``±noise`` of the estimates.

    Raises ValueError when the plan does not fit the instance (a task missing, a machine or
    option that does not exist) or cannot be executed in its own order (a step planned
    before its parent on one machine)."""
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"noise must be in [0, 1), got {noise}")
    missing = [t.name for t in instance.tasks if t.name not in plan.placements]
    if missing:
        raise ValueError(f"the plan places no {', '.join(missing[:5])}; simulate a complete plan")
    factors = _runtime_factors(instance, noise, seed)
    planned = plan.placements
    runtime = {t.name: _estimate(instance, planned[t.name]) * factors[t.name] for t in instance.tasks}
    placements = _Replay(instance, planned, runtime).run()
    makespan = max((p.finish for p in placements.values()), default=0.0)
    cost = plan_cost(instance, placements)
    simulated = Plan(
        placements=placements,
        makespan=makespan,
        cost=cost,
        algorithm=f"simulated {plan.algorithm}",
        objective=plan.objective,
        notes=(f"run times within ±{noise:.0%} of the estimates, seed {seed}",),
    )
    return SimulationResult(
        makespan=makespan,
        cost=cost,
        utilization=utilization(instance, placements, makespan),
        plan=simulated,
        planned_makespan=plan.makespan,
        planned_cost=plan.cost,
        noise=noise,
        seed=seed,
        runtime_factors=factors,
    )
