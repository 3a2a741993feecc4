"""The simplest baseline a planner must beat: first fit in cluster order.

It is no real scheduler's policy: kube-scheduler scores nodes (``kubesched.py``) and Slurm
orders by priority and backfills (``backfill.py``); bench/planning/planner.py shows all three.
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

from hetflow.plan.baselines.eventsim import EventLoop, finish_plan
from hetflow.plan.instance import Instance, Option, Plan, Task


def _preference(task: Task) -> list[Option]:
    """GPU options first (most GPUs first), then the rest; within each, the build order,
    which is variant by variant in cluster order."""
    return sorted(task.options, key=lambda o: -o.gpus)


def greedy_first_fit(instance: Instance) -> Plan:
    """First-fit list scheduling in event order, as described in the module docstring."""
    loop = EventLoop(instance)
    order = loop.dag.order
    prefs = {t.name: _preference(t) for t in instance.tasks}

    # waiting steps, per shape, each queue in (ready time, topological index) order
    def shape_of(name: str) -> tuple[object, ...]:
        return tuple((o.variant, o.machine_class, o.cores, o.memory, o.gpus) for o in prefs[name])

    shapes = {name: shape_of(name) for name in order}
    waiting: dict[tuple[object, ...], deque[tuple[float, int, str]]] = {}

    def ready(name: str) -> None:
        waiting.setdefault(shapes[name], deque()).append((loop.now, order[name], name))

    for name in loop.dag.sources():
        ready(name)

    def bind(name: str) -> bool:
        for o in prefs[name]:
            d = loop.demand(o)
            for m in loop.by_class[o.machine_class]:
                if m.fits(d):
                    loop.start(name, m, o)
                    return True
        return False

    def schedule() -> None:
        heads = [(q[0][:2], s) for s, q in waiting.items() if q]
        heapq.heapify(heads)
        while heads:  # oldest waiting step first; a shape that does not fit sits out
            _, s = heapq.heappop(heads)
            q = waiting[s]
            if bind(q[0][2]):
                q.popleft()
                if q:
                    heapq.heappush(heads, (q[0][:2], s))

    def stuck() -> str:
        names = sorted(n for q in waiting.values() for _, _, n in q)
        return f"steps {', '.join(names[:5])} fit no machine even when the cluster is idle"

    placements = loop.run(schedule, ready, stuck)
    return finish_plan(
        instance,
        placements,
        "greedy-first-fit",
        ("first fit in cluster order, GPU variant when a GPU is free; no look-ahead",),
    )
