"""SAGA's schedulers (anrg-saga) on hetflow instances, for bench.planning.planner's SAGA table: an
instance as SAGA's ``Network`` and ``TaskGraph``, and SAGA's schedule back as a hetflow ``Plan``."""

from __future__ import annotations

from typing import Any

from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, MachineClass, Placement, Plan

# SAGA's model (saga/__init__.py, anrg-saga 2.0.2): a task's run time on a node is
# ``task.cost / node.speed`` and a transfer ``size / edge.speed``; schedulers take a
# ``Network`` (nodes with speeds, every pair linked, a node to itself at infinite speed) and
# a ``TaskGraph``.  A hetflow instance in SAGA mode is exactly that with cost = the CPU
# estimate (run time x class speed).  Unrelated machines (the Topcuoglu graph) do not fit
# cost / speed, so there a task's cost is its row of run times and a node's speed names the
# node: dividing one by the other looks the time up.  Only the arithmetic is overloaded;
# SAGA's code runs unchanged.


class _Proc:
    """Stands for a node's speed on unrelated machines: ``_Row / _Proc`` is a lookup."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __add__(self, other: object) -> _ProcSum:
        return _ProcSum([self]) + other

    __radd__ = __add__


class _ProcSum:
    """A sum of ``_Proc`` (``np.mean`` over nodes adds, then divides by the count)."""

    def __init__(self, items: list[_Proc]) -> None:
        self.items = items

    def __add__(self, other: object) -> _ProcSum:
        more = other.items if isinstance(other, _ProcSum) else [other] if isinstance(other, _Proc) else []
        return _ProcSum(self.items + more)

    __radd__ = __add__

    def __truediv__(self, n: object) -> _ProcSum:
        return self  # a mean over nodes; _Row averages its row over these nodes


class _Row:
    """A task's run time per node; divided by a node (``_Proc``) gives that node's time, by
    a mean of nodes (CPOP's mean speed) the mean time, as in the paper."""

    def __init__(self, row: dict[str, float]) -> None:
        self.row = row

    def __truediv__(self, speed: object) -> float:
        if isinstance(speed, _Proc):
            return self.row[speed.name]
        if isinstance(speed, _ProcSum):
            return sum(self.row[p.name] for p in speed.items) / len(speed.items)
        raise TypeError(f"cannot divide a run-time row by {speed!r}")


def _machines(instance: Instance) -> dict[str, MachineClass]:
    return {m: c for c in instance.classes for m in c.machine_ids()}


def saga_graphs(instance: Instance) -> tuple[Any, Any]:
    """SAGA's ``Network`` and ``TaskGraph`` for a one-task-per-machine, one-variant instance."""
    from saga import Network, TaskGraph  # type: ignore[import-untyped]

    machines = _machines(instance)
    rows: dict[str, dict[str, float]] = {}
    for t in instance.tasks:
        if len({o.variant for o in t.options}) != 1 or {o.machine_class for o in t.options} != {
            c.name for c in instance.classes
        }:
            raise ValueError(f"task {t.name!r}: SAGA needs one variant that runs on every node")
        by_class = {o.machine_class: o.runtime for o in t.options}
        rows[t.name] = {m: by_class[c.name] for m, c in machines.items()}
    work = {name: {row[m] * c.speed for m, c in machines.items()} for name, row in rows.items()}
    related = all(max(w) - min(w) <= 1e-9 * max(1.0, max(w)) for w in work.values())
    graph = TaskGraph.create(
        [(name, min(w) if related else 0.0) for name, w in work.items()],
        [(e.parent, e.child, e.bytes) for e in instance.edges],
    )
    ids = list(machines)
    network = Network.create(
        [(m, machines[m].speed) for m in ids],
        [(a, b, instance.bandwidth) for i, a in enumerate(ids) for b in ids[i + 1 :]],
    )
    if not related:
        for task in graph.tasks:
            if task.name in rows:
                task.cost = _Row(rows[task.name])
        for node in network.nodes:
            node.speed = _Proc(node.name)
    return network, graph


def saga_plan(instance: Instance, algorithm: str) -> Plan:
    """Run SAGA's scheduler and translate its schedule into a hetflow ``Plan``."""
    from saga.schedulers import CpopScheduler, HeftScheduler, MinMinScheduler  # type: ignore[import-untyped]

    scheduler = {"HEFT": HeftScheduler, "CPOP": CpopScheduler, "MinMin": MinMinScheduler}[algorithm]()
    network, graph = saga_graphs(instance)
    schedule = scheduler.schedule(network, graph)
    machines = _machines(instance)
    placements: dict[str, Placement] = {}
    for node, items in schedule.items():
        cls = machines[node]
        for s in items:
            if s.name.startswith("__super_"):  # SAGA's zero-cost single source / sink
                continue
            o = next(o for o in instance.task(s.name).options if o.machine_class == cls.name)
            placements[s.name] = Placement(s.name, o.variant, node, cls.name, s.start, s.end, o.cores, o.memory)
    makespan = max(p.finish for p in placements.values())
    return Plan(placements, makespan, plan_cost(instance, placements), f"saga-{algorithm.lower()}")
