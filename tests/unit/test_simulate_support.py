"""Builders for the simulate, gantt and virtual-cluster tests: small instances written by
hand, and a tiny insertion-based list scheduler that gives valid plans whether or not
``plan.heuristic`` exists (``schedule`` prefers the real planner when it is there)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Placement, Plan, Task

GIB = 1024**3


def mclass(
    name: str,
    count: int = 1,
    *,
    cores: int = 4,
    memory_gib: int = 16,
    speed: float = 1.0,
    gpus: int = 0,
    price: float = 1.0,
) -> MachineClass:
    return MachineClass(
        name=name,
        count=count,
        cores=cores,
        memory=memory_gib * GIB,
        speed=speed,
        gpus=gpus,
        gpu_model="NVIDIA A100" if gpus else "",
        gpu_memory=40 * GIB if gpus else 0,
        gpu_cc=(8, 0) if gpus else (0, 0),
        price_per_hour=price,
    )


def opt(
    variant: str, machine_class: str, runtime: float, *, cores: float = 1, mem_gib: float = 1, gpus: int = 0
) -> Option:
    return Option(variant, machine_class, runtime, cores, int(mem_gib * GIB), gpus)


def task(name: str, *options: Option) -> Task:
    return Task(name, tuple(options))


def instance(
    tasks: Sequence[Task],
    edges: Sequence[tuple[str, str, float]],
    classes: Sequence[MachineClass],
    *,
    bandwidth: float = 1e9,
    one_task_per_machine: bool = False,
) -> Instance:
    return Instance(
        tuple(tasks), tuple(Edge(p, c, b) for p, c, b in edges), tuple(classes), bandwidth, one_task_per_machine
    )


def chain_and_fork() -> Instance:
    """A fork-join of five steps on a CPU class and a GPU class: CPU-only, CPU-or-GPU, GPU-only."""
    cpu, gpu = mclass("cpu", 2, cores=4, price=0.5), mclass("gpu", 1, cores=8, gpus=2, price=4.0)
    tasks = [
        task("prep", opt("default", "cpu", 10, cores=2), opt("default", "gpu", 10, cores=2)),
        task(
            "a", opt("cpu", "cpu", 40, cores=4), opt("cpu", "gpu", 40, cores=4), opt("gpu", "gpu", 8, cores=2, gpus=1)
        ),
        task(
            "b", opt("cpu", "cpu", 30, cores=2), opt("cpu", "gpu", 30, cores=2), opt("gpu", "gpu", 6, cores=2, gpus=1)
        ),
        task("c", opt("gpu", "gpu", 12, cores=1, gpus=2)),
        task("join", opt("default", "cpu", 5), opt("default", "gpu", 5)),
    ]
    edges = [
        ("prep", "a", 2e9),
        ("prep", "b", 1e9),
        ("prep", "c", 0),
        ("a", "join", 1e9),
        ("b", "join", 0),
        ("c", "join", 5e8),
    ]
    return instance(tasks, edges, [cpu, gpu])


# --- a tiny list scheduler -----------------------------------------------------------------


def _fits(
    placed: list[Placement], cls: MachineClass, o: Option, start: float, exclusive: bool
) -> tuple[int, ...] | None:
    """GPU indices for ``o`` on a machine holding ``placed`` over [start, start+runtime), or None."""
    end = start + o.runtime
    overlap = [p for p in placed if p.start < end - 1e-9 and p.finish > start + 1e-9]
    if exclusive:
        return tuple(range(o.gpus)) if not overlap else None
    points = [start] + [p.start for p in overlap if p.start > start]
    for x in points:
        live = [p for p in overlap if p.start <= x + 1e-9 and p.finish > x + 1e-9]
        if (
            sum(p.cores for p in live) + o.cores > cls.cores + 1e-9
            or sum(p.memory for p in live) + o.memory > cls.memory
        ):
            return None
    used = {g for p in overlap for g in p.gpus}
    free = [g for g in range(cls.gpus) if g not in used]
    return tuple(free[: o.gpus]) if len(free) >= o.gpus else None


def list_schedule(inst: Instance) -> Plan:
    """Earliest finish time, tasks in the instance's order, insertion into gaps (HEFT-like)."""
    placements: dict[str, Placement] = {}
    on: dict[str, list[Placement]] = {}
    for t in inst.tasks:
        best: Placement | None = None
        for o in t.options:
            cls = inst.machine_class(o.machine_class)
            for mid in cls.machine_ids():
                ready = 0.0
                for e in inst.edges:
                    if e.child == t.name:
                        p = placements[e.parent]
                        ready = max(ready, p.finish + (0.0 if p.machine == mid else e.bytes / inst.bandwidth))
                placed = on.get(mid, [])
                for start in sorted({ready} | {p.finish for p in placed if p.finish > ready}):
                    gpus = _fits(placed, cls, o, start, inst.one_task_per_machine)
                    if gpus is not None:
                        cand = Placement(
                            t.name, o.variant, mid, cls.name, start, start + o.runtime, o.cores, o.memory, gpus
                        )
                        if best is None or cand.finish < best.finish - 1e-9:
                            best = cand
                        break
        assert best is not None, f"no option for {t.name}"
        placements[t.name] = best
        on.setdefault(best.machine, []).append(best)
    makespan = max((p.finish for p in placements.values()), default=0.0)
    return Plan(placements, makespan, plan_cost(inst, placements), "test-list")


def _heuristic() -> Callable[[Instance], Plan] | None:
    try:
        mod = importlib.import_module("hetflow.plan.search.heuristic")
    except ImportError:
        return None
    fn: Callable[[Instance], Plan] = mod.plan_heuristic
    return fn


def schedule(inst: Instance) -> Plan:
    """``plan_heuristic`` when it exists, else the list scheduler above."""
    fn = _heuristic()
    return fn(inst) if fn is not None else list_schedule(inst)
