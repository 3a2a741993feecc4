"""What the event-driven simulations share (the baselines ``firstfit.py``, ``kubesched.py``,
``backfill.py``, and the replay of a plan, ``plan.checking.simulator``): machines with free resources
(``model.Machine``, admitting through ``model.fits``), the DAG released step by step with its
one data-arrival rule (``Dag.data_ready``), one event loop, and the plan they end with.

A step is released (its pod created, its job made eligible) at the instant its last parent
finishes.  The scheduler then binds it to a node; the node's resources are held from that
instant, and the step starts once its inputs have arrived there (``bytes / bandwidth`` from
each parent on another node; nothing from one on the same node), as a pod or a batch job
that stages its inputs itself would.  ``Placement.start`` is that later start, so the plan
passes ``check_plan`` and its makespan includes the transfer waits.

In the one-task-per-machine model a node runs one step at a time: every node has one "core"
and every step asks for one (its GPUs are still counted).

``EventLoop`` is the loop: a policy's ``schedule`` starts what it starts now (a baseline
binds a step with ``EventLoop.start``; the replay holds a placement as planned with
``EventLoop.hold``, once its inputs are there, and asks to be woken when they will be:
``EventLoop.wake``), then time moves to the next event; each step finishing then gives back
what it held and releases its children to the policy's queue.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from hetflow.errors import NoFitError
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, Option, Placement, Plan
from hetflow.plan.model.fit import Demand
from hetflow.plan.model.machine import Machine


def nodes_of(instance: Instance) -> list[Machine]:
    """Every machine, idle, in cluster order."""
    one = instance.one_task_per_machine
    out: list[Machine] = []
    for c in instance.classes:
        for mid in c.machine_ids():
            out.append(Machine.idle(len(out), mid, c, one))
    return out


def demand(instance: Instance, o: Option) -> Demand:
    """What ``o`` holds on a node: its cores, memory and a count of whole GPUs."""
    if instance.one_task_per_machine:
        return Demand(1.0, 0, o.gpus)
    return Demand(o.cores, o.memory, o.gpus)


def amounts(instance: Instance, o: Option) -> tuple[float, int, int]:
    """``demand`` as (cores, memory, GPUs): the key of steps that ask alike, hashed in a hot
    loop (a tuple of numbers hashes in C, a ``Demand`` in Python)."""
    d = demand(instance, o)
    return d.cores, d.memory, d.gpus


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


Held = tuple[Machine, Demand, tuple[int, ...]]  # a machine, what a step holds there, the GPUs it took


class EventLoop:
    """The event loop of the event-driven simulations (module docstring): the machines, the
    DAG, the clock, the placements made and the pending events (a step's finish, or a wake-up).
    Events within ``tolerance`` of the next are one instant (the replay's rounding)."""

    def __init__(self, instance: Instance, tolerance: float = 0.0) -> None:
        self.instance = instance
        self.tolerance = tolerance
        self.dag = Dag(instance)
        self.nodes = nodes_of(instance)
        self.by_class: dict[str, list[Machine]] = {}
        self.by_id: dict[str, Machine] = {}
        for node in self.nodes:
            self.by_class.setdefault(node.cls.name, []).append(node)
            self.by_id[node.id] = node
        self.now = 0.0
        self.placements: dict[str, Placement] = {}
        self._held: dict[str, Sequence[Held]] = {}
        self._demands: dict[int, Demand] = {}  # by id(option): the instance keeps its options
        self._events: list[tuple[float, int, str]] = []  # (time, tie, finishing step or "" to wake up)

    def demand(self, o: Option) -> Demand:
        """``demand(instance, o)``, made once per option (the policies ask it in their loops)."""
        d = self._demands.get(id(o))
        if d is None:
            d = self._demands[id(o)] = demand(self.instance, o)
        return d

    def start(self, name: str, node: Machine, o: Option) -> Placement:
        """Bind ``name`` as option ``o`` to ``node`` now; it starts when its inputs are there."""
        d = self.demand(o)
        taken = node.take(d)
        begin = self.dag.data_ready(name, node.id, self.now, self.placements)
        p = Placement(name, o.variant, node.id, node.cls.name, begin, begin + o.runtime, o.cores, o.memory, taken)
        self.hold(p, [(node, d, taken)], self.dag.order[name])
        return p

    def hold(self, p: Placement, held: Sequence[Held], tie: int) -> None:
        """Record ``p``, whose step holds ``held`` (taken already) until ``p.finish``; among
        events at one time, the lower ``tie`` comes first."""
        self.placements[p.task] = p
        self._held[p.task] = held
        heapq.heappush(self._events, (p.finish, tie, p.task))

    def wake(self, at: float, tie: int) -> None:
        """Run the policy again at ``at`` (a step's inputs arrive then)."""
        heapq.heappush(self._events, (at, tie, ""))

    def run(
        self,
        schedule: Callable[[], object],
        release: Callable[[str], object],
        stuck: Callable[[], str],
        *,
        finished: Callable[[str], object] | None = None,
        after: Callable[[], object] | None = None,
    ) -> dict[str, Placement]:
        """Until nothing is left to happen: ``schedule()`` starts what the policy starts now;
        then the clock moves to the next event, each step finishing then gives back what it
        held (``finished(name)`` hears of it) and releases its children (``release(child)``),
        and ``after()`` runs once they all have.  When steps are left unplaced, raises
        NoFitError with the message ``stuck()``."""
        events = self._events
        while True:
            schedule()
            if not events:
                break
            self.now = events[0][0]
            while events and events[0][0] <= self.now + self.tolerance:
                _, _, name = heapq.heappop(events)
                if not name:
                    continue  # a wake-up
                for node, d, taken in self._held.pop(name):
                    node.give_back(d, taken, name)
                if finished is not None:
                    finished(name)
                for child in self.dag.finished(name):
                    release(child)
            if after is not None:
                after()
        if len(self.placements) < len(self.instance.tasks):
            raise NoFitError(stuck())
        return self.placements
