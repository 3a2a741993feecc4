"""A baseline that does what kube-scheduler's default profile does, one pod at a time.

The DAG is released step by step, as Argo or a chain of Kubernetes Jobs would: a step's pod
is created when its last parent finishes (``eventsim``).  Pods wait in one queue ordered by
creation time (PrioritySort with every pod at the same priority; ties in topological order).
Each scheduling cycle takes the head pod and runs the default plugins that tell nodes apart
on a cluster without taints, affinities or spread constraints:

* Filter, NodeResourcesFit: the pod's cpu, memory and ``nvidia.com/gpu`` requests fit what
  is unrequested on the node; the node's class must be one the step's variant may run on
  (the node selector hetflow would write).
* Score, NodeResourcesFit with the LeastAllocated strategy (weight 1), over the default
  scoring resources cpu and memory, each weight 1:
  ``sum((allocatable - requested) * 100 // allocatable) // 2``, requested including the pod
  (pkg/scheduler/framework/plugins/noderesources/least_allocated.go).  GPUs, an extended
  resource, are filtered on but not scored, as by default.
* Score, NodeResourcesBalancedAllocation (weight 1): ``int((1 - std) * 100)`` over the cpu and
  memory fractions requested, pod included; for two resources ``std = |f_cpu - f_mem| / 2``
  (balanced_allocation.go).
* The node with the highest sum wins; ties are broken at random, uniformly, as selectHost's
  reservoir sampling does, from ``random.Random(seed)``, so a seed gives one plan.

A pod that passes no node's filter is set aside (the unschedulable queue) and tried again
after the next pod finishes, in creation order; other pods behind it are still tried (no
head-of-line blocking).  Left out: backoff (1 to 10 s, short next to the steps here),
re-stamping a retried pod's queue time, percentageOfNodesToScore (every feasible node is
scored; at 256 nodes kube-scheduler would stop after about 48 % of them, at least 100),
ImageLocality.  kube-scheduler places one fixed pod spec; a step with several variants gets,
at each attempt, the one with GPUs if some node passes the filter for it then, else the next
(the local runner's "GPU variant when a GPU is free" rule, as if the pod were re-created with
that variant; kube-scheduler itself never chooses variants).  No taints:
pods without GPUs may land on GPU nodes, as on a default cluster.  Gangs are not modelled
(each step is one pod).
"""

from __future__ import annotations

import heapq
import random

from hetflow.plan.baselines.eventsim import EventLoop, amounts, finish_plan, preference
from hetflow.plan.instance import Instance, Option, Plan
from hetflow.plan.model.machine import Machine

MAX_NODE_SCORE = 100


def least_allocated(node: Machine, cores: float, memory: int) -> int:
    """NodeResourcesFit's LeastAllocated score of ``node`` for a pod asking for ``cores``
    and ``memory``: cpu in millicores, memory in bytes, integer arithmetic, as Go does."""
    total = 0
    for cap, free, ask in (
        (_milli(node.cap_cores), _milli(node.cores), _milli(cores)),
        (node.cap_memory, node.memory, memory),
    ):
        requested = cap - free + ask
        total += 0 if cap == 0 or requested > cap else (cap - requested) * MAX_NODE_SCORE // cap
    return total // 2


def balanced_allocation(node: Machine, cores: float, memory: int) -> int:
    """NodeResourcesBalancedAllocation's score: ``(1 - std) * 100`` of the requested fractions."""
    fractions = []
    for cap, used in (
        (node.cap_cores, node.cap_cores - node.cores + cores),
        (node.cap_memory, node.cap_memory - node.memory + memory),
    ):
        if cap > 0:
            fractions.append(min(1.0, used / cap))
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def _milli(cores: float) -> int:
    return round(cores * 1000)


def kube_scheduler(instance: Instance, seed: int = 0) -> Plan:
    """kube-scheduler's default filter and scores, pods bound in queue order (module docstring)."""
    rng = random.Random(seed)
    loop = EventLoop(instance)
    order = loop.dag.order
    variants: dict[str, list[list[Option]]] = {}
    shapes: dict[str, tuple[object, ...]] = {}
    for t in instance.tasks:
        variants[t.name] = [[o for o in t.options if o.variant == v] for v in preference(t.options)]
        shapes[t.name] = tuple((o.variant, o.machine_class, amounts(instance, o)) for o in t.options)

    queue: list[tuple[float, int, str]] = [(0.0, order[n], n) for n in loop.dag.sources()]
    heapq.heapify(queue)
    unschedulable: list[tuple[float, int, str]] = []

    def cycle(name: str) -> bool:
        """One scheduling cycle: filter, score, bind; False when no node passes the filter."""
        for options in variants[name]:
            scored: list[tuple[int, Machine, Option]] = []
            for o in options:
                d = loop.demand(o)
                for node in loop.by_class.get(o.machine_class, ()):
                    if node.fits(d):
                        score = least_allocated(node, d.cores, d.memory) + balanced_allocation(node, d.cores, d.memory)
                        scored.append((score, node, o))
            if not scored:
                continue
            top = max(s for s, _, _ in scored)
            _, node, o = rng.choice([x for x in scored if x[0] == top])
            loop.start(name, node, o)
            return True
        return False

    def schedule() -> None:
        failed: set[tuple[object, ...]] = set()  # nothing frees up within a cycle run
        while queue:
            item = heapq.heappop(queue)
            if shapes[item[2]] in failed or not cycle(item[2]):
                failed.add(shapes[item[2]])
                unschedulable.append(item)

    def release(child: str) -> None:
        heapq.heappush(queue, (loop.now, order[child], child))

    def retry() -> None:  # a pod finished: MoveAllToActiveOrBackoffQueue
        for item in unschedulable:
            heapq.heappush(queue, item)
        unschedulable.clear()

    def stuck() -> str:
        names = sorted(n for _, _, n in unschedulable)
        return f"steps {', '.join(names[:5])} fit no node even when the cluster is idle"

    placements = loop.run(schedule, release, stuck, after=retry)
    return finish_plan(
        instance,
        placements,
        "kube-scheduler",
        (f"kube-scheduler default scores (LeastAllocated + BalancedAllocation), ties at random (seed {seed})",),
    )
