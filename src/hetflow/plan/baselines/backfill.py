"""A baseline that does what a Slurm cluster with EASY backfill does with a DAG of jobs.

Every step is a batch job submitted with ``--dependency=afterok`` on its parents, so it
becomes eligible when its last parent finishes (``eventsim``).  Priority: the multifactor
plugin with only the age factor, which grows from the time a job becomes eligible; every
job ages at the same rate, so the order is eligible time, then job id (topological order).

A job asks for one fixed set of resources (``--cpus-per-task``, ``--mem``, ``--gres=gpu:N``),
chosen when it is submitted with the local runner's rule: the variant with GPUs if a node
could start it then, else the next variant that a node could start, else the one with GPUs;
on a partition list naming every class that variant may run on (``-p a,b``: the job runs in
whichever can start it).  Nodes are taken in cluster order,
the first that fits (select/cons_tres with equal node weights).

EASY backfill (Lifka 1995; Mu'alem and Feitelson, IEEE TPDS 12(6), 2001), at every job
finish and submission (as if ``bf_interval`` were 0):

1. jobs start in priority order while they fit now;
2. the first that does not gets a reservation: the earliest time it fits on one of its
   nodes when the running jobs end at their time limits, on the first such node;
3. every later job starts now, on the first node that fits it, unless that would delay the
   reservation: on the reserved node it must end by the reserved time or leave the reserved
   job's resources free then.

The time limit of a job is exactly its run time plus the wait for its inputs on that node
(``eventsim``), so reservations are never wrong.  Users pad their limits, which makes
backfill start fewer jobs: this flatters the baseline.  Slurm's own sched/backfill also
reserves for later blocked jobs (up to ``bf_max_job_test``), closer to conservative backfill;
this is EASY, one reservation.  Gangs are not modelled (each step is one job).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

from hetflow.errors import NoFitError
from hetflow.plan.baselines.eventsim import EventLoop, amounts, finish_plan, preference
from hetflow.plan.instance import Instance, Option, Plan
from hetflow.plan.model.fit import Demand, NodeState, fits
from hetflow.plan.model.machine import Machine


@dataclass(frozen=True)
class _Job:
    name: str
    options: tuple[Option, ...]  # the submitted variant, one per class it may run on
    shape: tuple[object, ...]  # jobs of one shape fit the same nodes (the same resources)


@dataclass
class _Reservation:
    at: float
    node: Machine
    cores: float  # what the reserved job leaves free on its node at ``at``
    memory: int
    gpus: int

    def fits(self, d: Demand) -> bool:
        """Whether ``d`` fits in what the reserved job leaves spare."""
        return not fits(NodeState(self.cores, self.memory, self.gpus), d)


class _Backfill:
    """One run of the Slurm-style scheduler (module docstring) over ``EventLoop``: the jobs
    submitted, the pending queue in priority order, and what runs on each node until when."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.loop = EventLoop(instance)
        self.tasks = {t.name: t for t in instance.tasks}
        self.jobs: dict[str, _Job] = {}
        # a shape's nodes, in cluster order, each with the index of the job's option there
        self.where: dict[tuple[object, ...], list[tuple[Machine, int]]] = {}
        self.pending: list[tuple[float, int, str]] = []  # (eligible, job id, name), priority order
        self.shapes_pending: Counter[tuple[object, ...]] = Counter()
        # per node, what runs there: task -> (end, cores, memory, GPUs)
        self.on_node: dict[str, dict[str, tuple[float, float, int, int]]] = {n.id: {} for n in self.loop.nodes}

    def submit(self, name: str) -> None:
        instance, by_class = self.instance, self.loop.by_class
        options = self.tasks[name].options
        variants = [tuple(o for o in options if o.variant == v) for v in preference(options)]
        chosen = next(
            (
                opts
                for opts in variants
                if any(n.fits(self.loop.demand(o)) for o in opts for n in by_class.get(o.machine_class, ()))
            ),
            variants[0],
        )
        job = _Job(name, chosen, tuple((o.machine_class, amounts(instance, o)) for o in chosen))
        self.jobs[name] = job
        if job.shape not in self.where:
            pairs = [(n, k) for k, o in enumerate(chosen) for n in by_class.get(o.machine_class, ())]
            self.where[job.shape] = sorted(pairs, key=lambda nk: nk[0].index)
        bisect.insort(self.pending, (self.loop.now, self.loop.dag.order[name], name))
        self.shapes_pending[job.shape] += 1

    def start(self, name: str, node: Machine, o: Option) -> None:
        p = self.loop.start(name, node, o)
        d = self.loop.demand(o)
        self.on_node[node.id][name] = (p.finish, d.cores, d.memory, d.gpus)

    def finished(self, name: str) -> None:
        del self.on_node[self.loop.placements[name].machine][name]

    def reservation(self, job: _Job) -> _Reservation:
        best: _Reservation | None = None
        for node, k in self.where[job.shape]:
            d = self.loop.demand(job.options[k])
            free_c, free_m, free_g = node.cores, node.memory, len(node.gpus)
            for end, c, m, g in sorted(self.on_node[node.id].values()):
                if best is not None and end >= best.at:
                    break
                free_c, free_m, free_g = free_c + c, free_m + m, free_g + g
                if not fits(NodeState(free_c, free_m, free_g), d):
                    best = _Reservation(end, node, free_c - d.cores, free_m - d.memory, free_g - d.gpus)
                    break
        if best is None:
            raise NoFitError(f"job {job.name!r} fits none of its nodes even when they are idle")
        return best

    def pick(
        self, job: _Job, fitting: list[tuple[Machine, int]], res: _Reservation | None
    ) -> tuple[Machine, Option] | None:
        """The first node that fits ``job`` now without delaying the reservation ``res``
        (a job on the reserved node must end by its time or fit in what it leaves spare)."""
        for node, k in fitting:
            o = job.options[k]
            if res is None or node is not res.node:
                return node, o
            ends = self.loop.dag.data_ready(job.name, node.id, self.loop.now, self.loop.placements) + o.runtime
            d = self.loop.demand(o)
            if ends <= res.at or res.fits(d):
                if ends > res.at:  # runs past the reserved time on the reserved node: uses the spare
                    res.cores, res.memory, res.gpus = res.cores - d.cores, res.memory - d.memory, res.gpus - d.gpus
                return node, o
        return None

    def schedule(self) -> None:
        res: _Reservation | None = None
        failed: set[tuple[object, ...]] = set()  # shapes that fit no node now
        fitting: dict[tuple[object, ...], list[tuple[Machine, int]]] = {}  # cleared by every start
        kept: list[tuple[float, int, str]] = []
        for i, item in enumerate(self.pending):
            if len(failed) == len(self.shapes_pending):  # nothing left can start
                kept += self.pending[i:]
                break
            job = self.jobs[item[2]]
            if job.shape in failed:
                kept.append(item)
                continue
            if job.shape not in fitting:
                fitting[job.shape] = [
                    (n, k) for n, k in self.where[job.shape] if n.fits(self.loop.demand(job.options[k]))
                ]
            chosen = self.pick(job, fitting[job.shape], res)
            if chosen is not None:
                self.start(job.name, *chosen)
                self.shapes_pending[job.shape] -= 1
                if self.shapes_pending[job.shape] == 0:
                    del self.shapes_pending[job.shape]
                fitting.clear()
                continue
            kept.append(item)
            if not fitting[job.shape]:
                failed.add(job.shape)
            if res is None:
                res = self.reservation(job)
        self.pending = kept

    def stuck(self) -> str:
        names = sorted(n for _, _, n in self.pending)
        return f"jobs {', '.join(names[:5])} fit no node even when the cluster is idle"


def slurm_backfill(instance: Instance) -> Plan:
    """Priority by age, first fit, EASY backfill (module docstring)."""
    run = _Backfill(instance)
    for name in run.loop.dag.sources():
        run.submit(name)
    placements = run.loop.run(run.schedule, run.submit, run.stuck, finished=run.finished)
    return finish_plan(
        instance,
        placements,
        "slurm-backfill",
        ("priority by age (eligible time), first fit in node order, EASY backfill, limits = run times",),
    )
