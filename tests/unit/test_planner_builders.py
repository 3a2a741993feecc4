"""Builders of planning instances for the planner tests, and tests of the builders.

- ``topcuoglu()``: the 10-task graph of the HEFT paper, from bench/data (carried in the repository).
- ``random_layered(n, machines, seed)``: a layered random DAG on a cluster shaped like
  ``hetero-16`` (bench/README.md) scaled to ``machines``, with GPU variants for a fifth of
  the tasks; multi-resource unless ``one_task_per_machine``.
- ``instances()``: a hypothesis strategy of small instances (1-7 tasks, 1-3 classes).
"""

from __future__ import annotations

import json
import random

from bench.data import CANONICAL
from hypothesis import strategies as st

from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Task

GIB = 1024**3
TOPCUOGLU = CANONICAL / "topcuoglu2002.json"


def topcuoglu() -> Instance:
    """3 classes P1..P3 of one machine each; bytes = the edge's cost; bandwidth 1."""
    data = json.loads(TOPCUOGLU.read_text())
    procs, cost, edges = data["processors"], data["cost"], data["edges"]
    classes = tuple(MachineClass(p, count=1, cores=1, memory=GIB) for p in procs)
    tasks = tuple(
        Task(name, tuple(Option("cpu", p, float(c), cores=1, memory=GIB) for p, c in zip(procs, row, strict=True)))
        for name, row in cost.items()
    )
    return Instance(
        tasks,
        tuple(Edge(a, b, float(w)) for a, b, w in edges),
        classes,
        bandwidth=1.0,
        one_task_per_machine=True,
    )


def hetero(machines: int) -> tuple[MachineClass, ...]:
    """``hetero-16`` scaled: half cpu.std, a quarter cpu.fast, the rest T4 and A100 nodes."""
    a100 = max(1, machines // 16)
    t4 = max(1, machines * 3 // 16)
    fast = max(1, machines // 4)
    std = max(1, machines - a100 - t4 - fast)
    return (
        MachineClass("cpu.std", std, 16, 64 * GIB, speed=1.0, price_per_hour=0.68),
        MachineClass("cpu.fast", fast, 16, 64 * GIB, speed=1.4, price_per_hour=0.95),
        MachineClass("gpu.t4", t4, 8, 32 * GIB, gpus=1, gpu_speed=3.0 / 8.5, price_per_hour=0.75),
        MachineClass("gpu.a100", a100, 48, 384 * GIB, speed=1.2, gpus=4, price_per_hour=16.39),
    )


def random_layered(
    n: int, machines: int, seed: int = 0, *, one_task_per_machine: bool = False, width: int | None = None
) -> Instance:
    """``n`` tasks in layers of about ``width`` (default sqrt(4n)); each task reads from 1-3
    tasks of the previous two layers; run times 10-600 s, 1-8 cores, 1-16 GiB; a fifth of
    the tasks also have a 1-GPU variant, 8.5x faster on an A100, 3x on a T4."""
    rng = random.Random(seed)
    classes = hetero(machines)
    width = width or max(2, int((4 * n) ** 0.5))
    layers: list[list[str]] = []
    tasks: list[Task] = []
    edges: list[Edge] = []
    for i in range(n):
        name = f"t{i}"
        if not layers or len(layers[-1]) >= width:
            layers.append([])
        pool = [t for layer in layers[-3:-1] for t in layer]
        for parent in rng.sample(pool, min(len(pool), rng.randint(1, 3))):
            edges.append(Edge(parent, name, rng.uniform(0, 2e9)))
        layers[-1].append(name)
        base, cores, memory = rng.uniform(10, 600), rng.randint(1, 8), rng.randint(1, 16) * GIB
        gpu = rng.random() < 0.2
        options: list[Option] = []
        for c in classes:
            options.append(Option("cpu", c.name, base / c.speed, cores, memory))
        if gpu:
            for c in classes:
                if c.gpus:
                    options.append(Option("gpu", c.name, base / 8.5 / c.gpu_speed, 2, memory, gpus=1))
        tasks.append(Task(name, tuple(options)))
    return Instance(tuple(tasks), tuple(edges), classes, one_task_per_machine=one_task_per_machine)


@st.composite
def instances(draw: st.DrawFn, *, one_task_per_machine: bool | None = None, max_tasks: int = 7) -> Instance:
    """Small random instances: every task has at least one option that fits its class."""
    one_task = draw(st.booleans()) if one_task_per_machine is None else one_task_per_machine
    n_classes = draw(st.integers(1, 3))
    classes = tuple(
        MachineClass(
            f"c{k}",
            count=draw(st.integers(1, 2)),
            cores=draw(st.integers(2, 8)),
            memory=draw(st.integers(2, 8)) * GIB,
            gpus=draw(st.integers(0, 2)),
            price_per_hour=draw(st.sampled_from([0.5, 1.0, 3.0])),
        )
        for k in range(n_classes)
    )
    n = draw(st.integers(1, max_tasks))
    tasks = []
    for i in range(n):
        options: list[Option] = []
        for c in classes:
            if draw(st.booleans()) or (c is classes[-1] and not options):
                options.append(
                    Option(
                        "cpu",
                        c.name,
                        float(draw(st.integers(1, 20))),
                        cores=draw(st.integers(1, c.cores)),
                        memory=draw(st.integers(1, c.memory // GIB)) * GIB,
                    )
                )
            if c.gpus and draw(st.booleans()):
                options.append(
                    Option(
                        "gpu",
                        c.name,
                        float(draw(st.integers(1, 10))),
                        cores=1,
                        memory=GIB,
                        gpus=draw(st.integers(1, c.gpus)),
                    )
                )
        tasks.append(Task(f"t{i}", tuple(options)))
    edges = []
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=2)):
            edges.append(Edge(f"t{i}", f"t{j}", float(draw(st.integers(0, 8)))))
    return Instance(tuple(tasks), tuple(edges), classes, bandwidth=1.0, one_task_per_machine=one_task)


# --- the builders themselves ----------------------------------------------------------------


def test_topcuoglu_has_ten_tasks_fifteen_edges_three_processors() -> None:
    inst = topcuoglu()
    assert (len(inst.tasks), len(inst.edges), len(inst.classes)) == (10, 15, 3)


def test_random_layered_is_topological_and_scaled() -> None:
    inst = random_layered(300, 64, seed=1)
    position = {t.name: i for i, t in enumerate(inst.tasks)}
    assert all(position[e.parent] < position[e.child] for e in inst.edges)
    assert sum(c.count for c in inst.classes) == 64
