"""The simplest baseline a planner must beat: first fit in cluster order.

It is no real scheduler's policy: kube-scheduler scores nodes (``kubesched.py``) and Slurm
orders by priority and backfills (``backfill.py``); bench/planner.py shows all three.
An event-driven simulation with no look-ahead.  A step becomes ready when its last parent
finishes (as Argo creates a step's pod then); the ready steps, oldest first (ties in
topological order), each go to the FIRST machine in cluster order that fits them now,
taking a GPU variant when a qualifying GPU is free and a CPU variant otherwise (the local
runner's ``GreedyChooser`` rule).  A step that fits nowhere waits for the next finish.  The
machine is held from the moment the step is bound; the step starts once its inputs have
arrived (``bytes / bandwidth`` from a parent on another machine), so the plan is valid for
``check_plan`` and is what the cluster would do, transfer wait included.

Steps that ask for the same thing (the same options) either all fit now or the first of
them fails for the rest of the instant, so the waiting queue is kept per such *shape* and a
failing shape is skipped until something finishes (Nomad's per-class feasibility cache).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from hetflow.errors import NoFitError
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Plan, Task

_EPS = 1e-9


@dataclass
class _Machine:
    id: str
    cls: MachineClass
    cores: float
    memory: int
    gpus: list[int] = field(default_factory=list)  # free GPU indices, ascending
    busy: bool = False  # one-task-per-machine model

    def fits(self, o: Option, one_task: bool) -> bool:
        if one_task:
            return not self.busy
        return o.cores <= self.cores + _EPS and o.memory <= self.memory and o.gpus <= len(self.gpus)

    def take(self, o: Option, one_task: bool) -> tuple[int, ...]:
        if one_task:
            self.busy = True
            return tuple(self.gpus[: o.gpus])  # the whole machine is the task's; name its GPUs
        self.cores -= o.cores
        self.memory -= o.memory
        taken, self.gpus = self.gpus[: o.gpus], self.gpus[o.gpus :]
        return tuple(taken)

    def give_back(self, o: Option, gpus: tuple[int, ...], one_task: bool) -> None:
        if one_task:
            self.busy = False
            return
        self.cores += o.cores
        self.memory += o.memory
        self.gpus = sorted(self.gpus + list(gpus))


def _preference(task: Task) -> list[Option]:
    """GPU options first (most GPUs first), then the rest; within each, the build order,
    which is variant by variant in cluster order."""
    return sorted(task.options, key=lambda o: -o.gpus)


def greedy_first_fit(instance: Instance) -> Plan:
    """First-fit list scheduling in event order, as described in the module docstring."""
    one = instance.one_task_per_machine
    machines = [
        _Machine(mid, c, float(c.cores), c.memory, list(range(c.gpus)))
        for c in instance.classes
        for mid in c.machine_ids()
    ]
    by_class: dict[str, list[_Machine]] = {}
    for m in machines:
        by_class.setdefault(m.cls.name, []).append(m)
    order = {t.name: i for i, t in enumerate(instance.tasks)}
    tasks = {t.name: t for t in instance.tasks}
    prefs = {t.name: _preference(t) for t in instance.tasks}
    parents: dict[str, list[tuple[str, float]]] = {t.name: [] for t in instance.tasks}
    children: dict[str, list[str]] = {t.name: [] for t in instance.tasks}
    for e in instance.edges:
        parents[e.child].append((e.parent, e.bytes))
        children[e.parent].append(e.child)
    missing = {name: len(ps) for name, ps in parents.items()}

    # waiting steps, per shape, each queue in (ready time, topological index) order
    def shape_of(name: str) -> tuple[object, ...]:
        return tuple((o.variant, o.machine_class, o.cores, o.memory, o.gpus) for o in prefs[name])

    shapes = {name: shape_of(name) for name in tasks}
    waiting: dict[tuple[object, ...], deque[tuple[float, int, str]]] = {}

    def ready(name: str, at: float) -> None:
        waiting.setdefault(shapes[name], deque()).append((at, order[name], name))

    for name in tasks:
        if missing[name] == 0:
            ready(name, 0.0)

    placements: dict[str, Placement] = {}
    held: dict[str, tuple[_Machine, Option, tuple[int, ...]]] = {}
    running: list[tuple[float, int, str]] = []  # (finish, index, task)
    now = 0.0

    def data_ready(name: str, machine: str) -> float:
        t = now
        for p, size in parents[name]:
            pp = placements[p]
            delay = 0.0 if pp.machine == machine or size <= 0 else size / instance.bandwidth
            t = max(t, pp.finish + delay)
        return t

    def bind(name: str) -> bool:
        for o in prefs[name]:
            for m in by_class[o.machine_class]:
                if m.fits(o, one):
                    gpus = m.take(o, one)
                    start = data_ready(name, m.id)
                    finish = start + o.runtime
                    placements[name] = Placement(
                        name, o.variant, m.id, m.cls.name, start, finish, o.cores, o.memory, gpus
                    )
                    held[name] = (m, o, gpus)
                    heapq.heappush(running, (finish, order[name], name))
                    return True
        return False

    while len(placements) < len(tasks):
        heads = [(q[0][:2], s) for s, q in waiting.items() if q]
        heapq.heapify(heads)
        while heads:  # oldest waiting step first; a shape that does not fit sits out
            _, s = heapq.heappop(heads)
            q = waiting[s]
            if bind(q[0][2]):
                q.popleft()
                if q:
                    heapq.heappush(heads, (q[0][:2], s))
        if not running:
            stuck = sorted(n for q in waiting.values() for _, _, n in q)
            raise NoFitError(f"steps {', '.join(stuck[:5])} fit no machine even when the cluster is idle")
        now = running[0][0]
        while running and running[0][0] <= now:
            _, _, name = heapq.heappop(running)
            m, o, gpus = held.pop(name)
            m.give_back(o, gpus, one)
            for child in children[name]:
                missing[child] -= 1
                if missing[child] == 0:
                    ready(child, now)
    makespan = max((p.finish for p in placements.values()), default=0.0)
    return Plan(
        placements=placements,
        makespan=makespan,
        cost=plan_cost(instance, placements),
        algorithm="greedy-first-fit",
        notes=("first fit in cluster order, GPU variant when a GPU is free; no look-ahead",),
    )
