"""A finished run's actual schedule as a Plan, so it can be drawn like a planned one."""

from __future__ import annotations

from hetflow.plan import Instance, MachineClass, Placement, Plan
from hetflow.state import AttemptRecord, RunRecord


def actual_schedule(run: RunRecord, attempts: list[AttemptRecord]) -> tuple[Plan, Instance]:
    """Every attempt that started (failed ones too: they took the machine) as a placement,
    times relative to the run's start; one lane per node the run used."""
    t0 = run.started or run.created
    placements: dict[str, Placement] = {}
    nodes: dict[str, int] = {}
    for a in attempts:
        if a.started is None:
            continue
        # from when it ran, not when it was handed over: a cluster engine queues its jobs
        begun = a.run_started if a.run_started is not None else a.started
        end = a.ended if a.ended is not None else (run.ended or begun)
        label = a.step if a.state == "succeeded" else f"{a.step}#{a.attempt} ({a.state})"
        placements[label] = Placement(
            task=label,
            variant=a.variant,
            machine=f"{a.node}-0",
            machine_class=a.node,
            start=begun - t0,
            finish=end - t0,
            cores=0.0,
            memory=0,
            gpus=a.gpus,
        )
        nodes[a.node] = max(nodes.get(a.node, 0), max(a.gpus, default=-1) + 1)
    makespan = max((p.finish for p in placements.values()), default=0.0)
    classes = tuple(MachineClass(name=n, count=1, cores=1, memory=0, gpus=g) for n, g in sorted(nodes.items()))
    plan = Plan(placements=placements, makespan=makespan, cost=0.0, algorithm=f"run {run.id} of {run.name}")
    return plan, Instance(tasks=(), edges=(), classes=classes)
