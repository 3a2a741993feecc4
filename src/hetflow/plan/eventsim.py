"""What the cluster-scheduler baselines share: nodes with free resources, the DAG released
step by step, and the plan they end with (``kubesched.py``, ``backfill.py``).

A step is released (its pod created, its job made eligible) at the instant its last parent
finishes.  The scheduler then binds it to a node; the node's resources are held from that
instant, and the step starts once its inputs have arrived there (``bytes / bandwidth`` from
each parent on another node; nothing from one on the same node), as a pod or a batch job
that stages its inputs itself would.  ``Placement.start`` is that later start, so the plan
passes ``check_plan`` and its makespan includes the transfer waits.

In the one-task-per-machine model a node runs one step at a time: every node has one "core"
and every step asks for one (its GPUs are still counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Plan

_EPS = 1e-9  # fractional cores add up with rounding error; a hair over capacity still fits


@dataclass
class Node:
    """One machine: its capacity and what is free now."""

    index: int  # cluster order: class by class, then by number
    id: str
    cls: MachineClass
    cap_cores: float
    cap_memory: int
    cores: float
    memory: int
    gpus: list[int] = field(default_factory=list)  # free GPU indices, ascending

    def fits(self, cores: float, memory: int, gpus: int) -> bool:
        return cores <= self.cores + _EPS and memory <= self.memory and gpus <= len(self.gpus)

    def take(self, cores: float, memory: int, gpus: int) -> tuple[int, ...]:
        self.cores -= cores
        self.memory -= memory
        taken, self.gpus = self.gpus[:gpus], self.gpus[gpus:]
        return tuple(taken)

    def give_back(self, cores: float, memory: int, gpus: tuple[int, ...]) -> None:
        self.cores += cores
        self.memory += memory
        self.gpus = sorted(self.gpus + list(gpus))


def nodes_of(instance: Instance) -> list[Node]:
    """Every machine, idle, in cluster order."""
    one = instance.one_task_per_machine
    out: list[Node] = []
    for c in instance.classes:
        for mid in c.machine_ids():
            cores, memory = (1.0, 0) if one else (float(c.cores), c.memory)
            out.append(Node(len(out), mid, c, cores, memory, cores, memory, list(range(c.gpus))))
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
