"""A finished run's actual schedule as a Plan, so it can be drawn like a planned one."""

from __future__ import annotations

from hetflow.plan import Instance, MachineClass, Placement, Plan
from hetflow.report.trace import PCT_MIN_REALTIME
from hetflow.spec import format_bytes
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
        label = bar_label(a)
        placements[label] = Placement(
            task=label,
            variant=a.variant,
            machine=f"{a.node}-0",
            machine_class=a.node,
            start=begun - t0,
            finish=end - t0,
            cores=a.cpus or 0.0,  # what it asked (the hover of the report's timeline says what it used)
            memory=a.memory or 0,
            gpus=a.gpus,
        )
        nodes[a.node] = max(nodes.get(a.node, 0), max(a.gpus, default=-1) + 1)
    makespan = max((p.finish for p in placements.values()), default=0.0)
    classes = tuple(MachineClass(name=n, count=1, cores=1, memory=0, gpus=g) for n, g in sorted(nodes.items()))
    plan = Plan(placements=placements, makespan=makespan, cost=0.0, algorithm=f"run {run.id} of {run.name}")
    return plan, Instance(tasks=(), edges=(), classes=classes)


def bar_label(a: AttemptRecord) -> str:
    """An attempt's bar: the step where it succeeded, else ``step#2 (failed)``."""
    return a.step if a.state == "succeeded" else f"{a.step}#{a.attempt} ({a.shown_state})"


def bar_resources(attempts: list[AttemptRecord]) -> dict[str, str]:
    """What each attempt's bar says of resources: what it asked and what it used (its peak
    memory, its CPU time over its run time), "not measured" where the engine could not say."""
    out = {}
    for a in attempts:
        asked = (
            f"asked {a.cpus:g} cores, {format_bytes(a.memory or 0)}" if a.cpus is not None else "asked: not recorded"
        )
        realtime = a.run_ended - a.run_started if a.run_ended is not None and a.run_started is not None else None
        # under PCT_MIN_REALTIME the cgroup's CPU time is mostly the runtime's start-up (trace's %cpu)
        measurable = a.cpu_seconds is not None and realtime is not None and realtime >= PCT_MIN_REALTIME
        cores = f"{(a.cpu_seconds or 0.0) / (realtime or 1.0):.2f} cores" if measurable else None
        peak = f"peak {format_bytes(a.peak_memory)}" if a.peak_memory is not None else None
        used = ", ".join(x for x in (cores, peak) if x) or "not measured"
        out[bar_label(a)] = f"{asked}; used {used}"
    return out
