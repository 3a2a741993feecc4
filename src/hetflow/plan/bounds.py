"""A lower bound on any plan's makespan, as shared/bench/README.md defines it ("Lower bound"),
with a GPU term beside it.

    LB = max(critical path, total work / total capacity, GPU work / GPU capacity)

* Critical path: the longest chain of the DAG with every task at its fastest option (its
  fastest variant on its fastest class) and communication free.
* Work: every task's smallest core-seconds, counted at speed 1.0 (an option's run time x
  its cores x its class's speed, so a task does the same work on a fast or a slow node),
  divided by the cluster's total core-speed (the sum over machines of cores x speed).  In
  the one-task-per-machine model a task takes a whole machine, so cores count as 1.

* GPU work: a task none of whose options runs without a GPU holds, on whichever option it
  takes, ``gpus x runtime`` GPU-seconds; weighted by its class's ``gpu_speed`` (so an A100
  second counts for more than a T4 second) the least of those over its options is work no
  schedule avoids.  Their total over the cluster's weighted GPUs (the sum over machines of
  GPUs x gpu_speed) bounds the makespan.  A task with a CPU option counts 0: it could run
  on the CPUs, so counting it would not be a bound (the work term already counts its cores).

All are valid bounds: no task finishes before its chain of predecessors, and no schedule
does more core-seconds (or weighted GPU-seconds) per second than the cluster has.  Any
positive weights would keep the GPU term valid; the GPU speed is what makes it tight.
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


def _gpu_weight(speed: float) -> float:
    return speed if speed > 0 else 1.0


def gpu_bound(instance: Instance) -> float:
    """Total least weighted GPU-seconds of the tasks that cannot run without a GPU, over the
    cluster's weighted GPU count (see the module docstring); 0 when no task needs a GPU."""
    weight = {c.name: _gpu_weight(c.gpu_speed) for c in instance.classes}
    work = 0.0
    for t in instance.tasks:
        if t.options and all(o.gpus > 0 for o in t.options):
            work += min(o.gpus * o.runtime * weight[o.machine_class] * max(1, t.replicas) for o in t.options)
    capacity = sum(c.count * c.gpus * _gpu_weight(c.gpu_speed) for c in instance.classes)
    return work / capacity if capacity > 0 and work > 0 else 0.0


def lower_bound(instance: Instance) -> float:
    """``max(critical_path, work_bound, gpu_bound)``: no plan of ``instance`` finishes sooner."""
    return max(critical_path(instance), work_bound(instance), gpu_bound(instance))
