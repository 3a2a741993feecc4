"""The planning instance as the schedulers see it: ``Compiled`` holds tasks, the options
that fit (each a ``Choice``, a gang's with its per-node limit and comm times), machines and
edges with transfer times, as integer-indexed arrays; ``exact`` and ``heuristic`` share it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.errors import HetflowError, NoFitError
from hetflow.plan.cost import placement_cost
from hetflow.plan.feasible.filters import vendor_ok
from hetflow.plan.feasible.gangs import comm_time, fit_per_node
from hetflow.plan.instance import Instance, MachineClass, Option, Task
from hetflow.plan.search.timeline import GpuSlot, MachineTimeline
from hetflow.spec import mig_slices


@dataclass(frozen=True)
class Choice:
    """One option of a task, as the scheduler sees it."""

    index: int  # position in ``task.options``
    cls: int  # index into ``instance.classes``
    runtime: float
    cores: float  # demand on the timeline: 1 per task in the one-task-per-machine model
    memory: int
    gpus: int
    cost: float  # dollars, ``plan.cost``'s model; the same on every machine of the class
    cpu_on_gpu: bool  # no GPU used, on a class that has GPUs (``gpu_policy="avoid"``)
    # A gang (``plan.feasible.gangs``): replicas placed together, at most ``per_node`` on a machine,
    # running ``runtime + comm1`` on one machine and ``runtime + comm_n`` across several.
    replicas: int = 1
    per_node: int = 1
    comm1: float = 0.0
    comm_n: float = 0.0
    # A slice of one GPU (a shared tenant at a planned load, or a MIG instance), or the GPU
    # indices a whole-GPU option may take on a machine of mixed vendors; None: whole GPUs, any.
    slot: GpuSlot | None = None

    @property
    def gang(self) -> bool:
        return self.replicas > 1


class Compiled:
    """An ``Instance`` as integer-indexed arrays: tasks, choices, machines, edges.

    Machines are numbered class by class, in the order of ``instance.classes``; machine
    ``first[c] + i`` is ``"<class>-<i>"``."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.one_task = instance.one_task_per_machine
        self.names = [t.name for t in instance.tasks]
        self.n = len(self.names)
        index = {name: i for i, name in enumerate(self.names)}
        if len(index) != self.n:
            raise HetflowError("two tasks of the instance have the same name; task names must be unique")
        self.classes = instance.classes
        self.first: list[int] = []
        self.count: list[int] = []
        self.machine_class: list[int] = []
        self.machine_name: list[str] = []
        for c, cls in enumerate(self.classes):
            self.first.append(len(self.machine_class))
            self.count.append(cls.count)
            for name in cls.machine_ids():
                self.machine_class.append(c)
                self.machine_name.append(name)
        self.m = len(self.machine_class)
        self.parents: list[list[tuple[int, float]]] = [[] for _ in range(self.n)]
        self.children: list[list[tuple[int, float]]] = [[] for _ in range(self.n)]
        for e in instance.edges:
            if e.parent not in index or e.child not in index:
                raise HetflowError(f"edge {e.parent!r} -> {e.child!r} names a task that is not in the instance")
            comm = self.transfer_time(e.bytes)
            self.parents[index[e.child]].append((index[e.parent], comm))
            self.children[index[e.parent]].append((index[e.child], comm))
        self.by_name = {cls.name: c for c, cls in enumerate(self.classes)}
        # Steps that ask alike (a fan-out's items, a generated workflow) have equal options:
        # their choices are compiled once and the (read-only) lists shared.  Not a gang's: a
        # pass keys a gang candidate's machines by its choice's identity.
        alike: dict[tuple[Option, ...], tuple[list[Choice], list[Choice], float]] = {}
        self.choices: list[list[Choice]] = []
        self.by_runtime: list[list[Choice]] = []  # what every pass asks of the choices, once
        self.min_cost: list[float] = []
        for task in instance.tasks:
            got = alike.get(task.options) if task.replicas == 1 else None
            if got is None:
                chs = self._compile(task)
                got = (chs, sorted(chs, key=lambda ch: ch.runtime), min(ch.cost for ch in chs))
                if task.replicas == 1:
                    alike[task.options] = got
            self.choices.append(got[0])
            self.by_runtime.append(got[1])
            self.min_cost.append(got[2])
        self._order: list[int] | None = None

    def order(self) -> list[int]:
        """The tasks in a topological order (Kahn's, sources in task order), computed once."""
        if self._order is None:
            indeg = [len(ps) for ps in self.parents]
            order = [t for t in range(self.n) if indeg[t] == 0]
            for t in order:  # the list grows while it is read
                for c, _ in self.children[t]:
                    indeg[c] -= 1
                    if indeg[c] == 0:
                        order.append(c)
            if len(order) != self.n:
                raise HetflowError("the instance's edges form a cycle; a workflow must be a DAG")
            self._order = order
        return list(self._order)

    def transfer_time(self, nbytes: float) -> float:
        if nbytes <= 0:
            return 0.0
        if self.instance.bandwidth <= 0:
            raise HetflowError(f"bandwidth is {self.instance.bandwidth:g} bytes/s; it must be positive")
        return nbytes / self.instance.bandwidth

    def _compile(self, task: Task) -> list[Choice]:
        by_name = self.by_name
        out: list[Choice] = []
        why: list[str] = [f"{r.variant} on {r.machine_class}: {r.reason}" for r in task.rejected]
        for k, o in enumerate(task.options):
            c = by_name.get(o.machine_class)
            if c is None or self.classes[c].count <= 0:
                why.append(f"{o.variant} on {o.machine_class}: the cluster has no machine of that class")
                continue
            cls = self.classes[c]
            too_big = o.gpus > cls.gpus or (not self.one_task and (o.cores > cls.cores or o.memory > cls.memory))
            if too_big:
                why.append(f"{o.variant} on {o.machine_class}: asks for more than a whole machine")
                continue
            cost = placement_cost(cls, o.runtime, o.cores, o.memory, o.gpus, self.one_task)
            cores, memory = (1.0, 0) if self.one_task else (o.cores, o.memory)
            if task.replicas > 1:
                ch = self._gang_choice(task, k, c, cores, memory, cost)
                if ch.per_node * cls.count < task.replicas:  # hand-made instances; build filters these
                    why.append(
                        f"{o.variant} on {o.machine_class}: {task.replicas} replicas at most {ch.per_node} per "
                        f"machine need {-(-task.replicas // ch.per_node)} machines, and the class has {cls.count}"
                    )
                    continue
                out.append(ch)
                continue
            for rt, slot in gpu_slots(o, cls):
                amount = slot.share if slot and slot.share else mig_slices(o.mig) / 7 if o.mig else o.gpus
                cost = placement_cost(cls, rt, o.cores, o.memory, amount, self.one_task)
                out.append(Choice(k, c, rt, cores, memory, o.gpus, cost, o.gpus == 0 and cls.gpus > 0, slot=slot))
        if not out:
            raise NoFitError(f"task {task.name!r} has no option that fits a machine" + "".join(f"; {w}" for w in why))
        return out

    def _gang_choice(self, task: Task, k: int, c: int, cores: float, memory: int, cost: float) -> Choice:
        o, cls = task.options[k], self.classes[c]
        fit, _ = fit_per_node(cls, o.cores, o.memory, o.gpus, self.one_task)
        per_node = max(1, min(fit, task.per_node or fit, task.replicas))
        bw = self.instance.bandwidth
        comm1 = comm_time(cls, task.replicas, o.gpus, task.comm_bytes, 1, bw)
        comm_n = comm_time(cls, task.replicas, o.gpus, task.comm_bytes, 2, bw)
        cheapest = o.runtime + (comm1 if per_node >= task.replicas else comm_n)
        cost = cost / max(o.runtime, 1e-12) * cheapest * task.replicas if o.runtime > 0 else 0.0
        return Choice(
            k,
            c,
            o.runtime,
            cores,
            memory,
            o.gpus,
            cost,
            o.gpus == 0 and cls.gpus > 0,
            task.replicas,
            per_node,
            comm1,
            comm_n,
            gpu_slots(o, cls)[0][1],  # a gang takes whole GPUs: only its vendor's on a mixed machine
        )

    def timelines(self) -> list[MachineTimeline]:
        layouts = [tuple(cls.gpu_kind(g).mig for g in range(cls.gpus)) for cls in self.classes]
        if self.one_task:
            return [MachineTimeline(1.0, 0, self.classes[c].gpus, layouts[c]) for c in self.machine_class]
        return [
            MachineTimeline(self.classes[c].cores, self.classes[c].memory, self.classes[c].gpus, layouts[c])
            for c in self.machine_class
        ]


def share_levels(replicas: int) -> tuple[float, ...]:
    """The loads a time-sliced tenant may be planned at: 1 (no slowdown: the shares fit in
    one GPU), 1.5, then every whole number up to ``replicas`` (the most tenants, each < 1)."""
    return (1.0, 1.5, *(float(n) for n in range(2, replicas + 1)))


def timeslice_runtime(solo: float, load: float, slowdown: float) -> float:
    """The slowdown model: a time-sliced tenant's run time at ``load`` (the sum of the
    shares on its GPU) is ``solo x (1 + slowdown x max(0, load - 1))``."""
    return solo * (1.0 + slowdown * max(0.0, load - 1.0))


def gpu_slots(o: Option, cls: MachineClass) -> list[tuple[float, GpuSlot | None]]:
    """(run time, slot) of each way ``o`` may hold GPUs on ``cls``: a time-sliced share once
    per planned load (slower at higher loads; loads giving the same run time collapse to the
    highest), an MPS share at load 1 (each client keeps its share of the SMs: no slowdown),
    a MIG instance, or whole GPUs (restricted to the option's vendor on a mixed machine)."""
    only = None
    if cls.gpu_kinds and o.gpus:
        only = tuple(i for i in range(cls.gpus) if vendor_ok(cls.gpu_kind(i).vendor, o.vendor))
    sharing = cls.gpu_sharing
    if o.share > 0 and sharing.mode == "time-slicing":
        by_runtime: dict[float, GpuSlot] = {}
        for level in share_levels(sharing.replicas):
            rt = timeslice_runtime(o.runtime, level, sharing.resolved_slowdown)
            by_runtime[rt] = GpuSlot(o.share, level, sharing.replicas, only=only)
        return sorted(by_runtime.items(), key=lambda kv: kv[0])
    if o.share > 0:
        return [(o.runtime, GpuSlot(o.share, 1.0, sharing.replicas, only=only))]
    if o.mig:
        return [(o.runtime, GpuSlot(mig=o.mig, only=only))]
    return [(o.runtime, GpuSlot(only=only) if only is not None else None)]
