"""What the event-driven baselines share (``firstfit.py``, ``kubesched.py``, ``backfill.py``):
machines with free resources (``capacity.Machine``), the DAG released step by step, one
event loop, and the plan they end with.

A step is released (its pod created, its job made eligible) at the instant its last parent
finishes.  The scheduler then binds it to a node; the node's resources are held from that
instant, and the step starts once its inputs have arrived there (``bytes / bandwidth`` from
each parent on another node; nothing from one on the same node), as a pod or a batch job
that stages its inputs itself would.  ``Placement.start`` is that later start, so the plan
passes ``check_plan`` and its makespan includes the transfer waits.

In the one-task-per-machine model a node runs one step at a time: every node has one "core"
and every step asks for one (its GPUs are still counted).

``EventLoop`` is the loop: a baseline's ``schedule`` starts what its policy starts now
(``EventLoop.start``), then time moves to the next finish, which gives back what the step
held and releases its children to the baseline's queue.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from hetflow.errors import NoFitError
from hetflow.plan.capacity import Machine
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, Option, Placement, Plan


def nodes_of(instance: Instance) -> list[Machine]:
    """Every machine, idle, in cluster order."""
    one = instance.one_task_per_machine
    out: list[Machine] = []
    for c in instance.classes:
        for mid in c.machine_ids():
            out.append(Machine.idle(len(out), mid, c, one))
    return out


def demand(instance: Instance, o: Option) -> tuple[float, int, int]:
    """(cores, memory, GPUs) that ``o`` holds on a node."""
    if instance.one_task_per_machine:
        return 1.0, 0, o.gpus
    return o.cores, o.memory, o.gpus


def preference(options: tuple[Option, ...]) -> list[str]:
    """A step's variants, those with GPUs first (most GPUs first), then in build order."""
    seen: dict[str, int] = {}
    for o in options:
        seen[o.variant] = max(seen.get(o.variant, 0), o.gpus)
    return sorted(seen, key=lambda v: -seen[v])


class Dag:
    """Parents with edge sizes, children, and the step-by-step release of ready steps."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.order = {t.name: i for i, t in enumerate(instance.tasks)}  # topological (Instance contract)
        self.parents: dict[str, list[tuple[str, float]]] = {t.name: [] for t in instance.tasks}
        self.children: dict[str, list[str]] = {t.name: [] for t in instance.tasks}
        for e in instance.edges:
            self.parents[e.child].append((e.parent, e.bytes))
            self.children[e.parent].append(e.child)
        self.missing = {name: len(ps) for name, ps in self.parents.items()}

    def sources(self) -> list[str]:
        return [t.name for t in self.instance.tasks if self.missing[t.name] == 0]

    def finished(self, name: str) -> list[str]:
        """The children that ``name``'s finish releases."""
        out = []
        for child in self.children[name]:
            self.missing[child] -= 1
            if self.missing[child] == 0:
                out.append(child)
        return out

    def data_ready(self, name: str, node: str, now: float, placements: dict[str, Placement]) -> float:
        """When every input of ``name`` is on ``node``, if it is bound there at ``now``."""
        t = now
        for p, size in self.parents[name]:
            pp = placements[p]
            delay = 0.0 if pp.machine == node or size <= 0 else size / self.instance.bandwidth
            t = max(t, pp.finish + delay)
        return t


def finish_plan(instance: Instance, placements: dict[str, Placement], algorithm: str, notes: tuple[str, ...]) -> Plan:
    makespan = max((p.finish for p in placements.values()), default=0.0)
    return Plan(placements, makespan, plan_cost(instance, placements), algorithm, notes=notes)


class EventLoop:
    """The event loop of the event-driven baselines (module docstring): the machines, the
    DAG, the clock, the placements made and the steps running."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.dag = Dag(instance)
        self.nodes = nodes_of(instance)
        self.by_class: dict[str, list[Machine]] = {}
        for node in self.nodes:
            self.by_class.setdefault(node.cls.name, []).append(node)
        self.now = 0.0
        self.placements: dict[str, Placement] = {}
        self._held: dict[str, tuple[Machine, float, int, tuple[int, ...]]] = {}
        self._running: list[tuple[float, int, str]] = []  # (finish, topological index, step)

    def start(self, name: str, node: Machine, o: Option) -> Placement:
        """Bind ``name`` as option ``o`` to ``node`` now; it starts when its inputs are there."""
        cores, memory, gpus = demand(self.instance, o)
        taken = node.take(cores, memory, gpus)
        begin = self.dag.data_ready(name, node.id, self.now, self.placements)
        p = Placement(name, o.variant, node.id, node.cls.name, begin, begin + o.runtime, o.cores, o.memory, taken)
        self.placements[name] = p
        self._held[name] = (node, cores, memory, taken)
        heapq.heappush(self._running, (p.finish, self.dag.order[name], name))
        return p

    def run(
        self,
        schedule: Callable[[], object],
        release: Callable[[str], object],
        stuck: Callable[[], str],
        *,
        finished: Callable[[str], object] | None = None,
        after: Callable[[], object] | None = None,
    ) -> dict[str, Placement]:
        """Until every step is placed: ``schedule()`` starts what the policy starts now; then
        the clock moves to the next finish, each step finishing then gives back what it held
        (``finished(name)`` hears of it) and releases its children (``release(child)``), and
        ``after()`` runs once they all have.  When nothing runs and steps still wait, raises
        NoFitError with the message ``stuck()``."""
        while len(self.placements) < len(self.instance.tasks):
            schedule()
            if not self._running:
                raise NoFitError(stuck())
            self.now = self._running[0][0]
            while self._running and self._running[0][0] <= self.now:
                _, _, name = heapq.heappop(self._running)
                node, cores, memory, taken = self._held.pop(name)
                node.give_back(cores, memory, taken)
                if finished is not None:
                    finished(name)
                for child in self.dag.finished(name):
                    release(child)
            if after is not None:
                after()
        return self.placements
