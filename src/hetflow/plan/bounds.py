"""A lower bound on any plan's makespan, as shared/bench/README.md defines it ("Lower bound").

    LB = max(critical path, total work / total capacity)

* Critical path: the longest chain of the DAG with every task at its fastest option (its
  fastest variant on its fastest class) and communication free.
* Work: every task's smallest core-seconds, counted at speed 1.0 (an option's run time x
  its cores x its class's speed, so a task does the same work on a fast or a slow node),
  divided by the cluster's total core-speed (the sum over machines of cores x speed).  In
  the one-task-per-machine model a task takes a whole machine, so cores count as 1.

Both are valid bounds: no task finishes before its chain of predecessors, and no schedule
does more core-seconds per second than the cluster has.
"""

from __future__ import annotations

from hetflow.plan.instance import Instance


def critical_path(instance: Instance) -> float:
    """The longest chain with each task at its fastest option, communication free."""
    fastest = {t.name: min(o.runtime for o in t.options) for t in instance.tasks}
    parents: dict[str, list[str]] = {t.name: [] for t in instance.tasks}
    for e in instance.edges:
        parents[e.child].append(e.parent)
    finish: dict[str, float] = {}
    for t in instance.tasks:  # topological order (the Instance contract)
        finish[t.name] = max((finish[p] for p in parents[t.name]), default=0.0) + fastest[t.name]
    return max(finish.values(), default=0.0)


def work_bound(instance: Instance) -> float:
    """Total smallest speed-1 core-seconds over the cluster's total core-speed."""
    one = instance.one_task_per_machine
    speed = {c.name: c.speed for c in instance.classes}
    work = sum(
        min(o.runtime * (1.0 if one else o.cores) * speed[o.machine_class] for o in t.options) for t in instance.tasks
    )
    capacity = sum(c.count * (1 if one else c.cores) * c.speed for c in instance.classes)
    return work / capacity if capacity > 0 else 0.0


def lower_bound(instance: Instance) -> float:
    """``max(critical_path, work_bound)``: no plan of ``instance`` finishes sooner."""
    return max(critical_path(instance), work_bound(instance))
