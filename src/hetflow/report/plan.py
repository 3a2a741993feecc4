"""A plan for people (a table, and per-step explanations) and for scripts (JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hetflow.plan import Instance, Placement, Plan, explain
from hetflow.report.tables import BIG, PlainTable, plain_table


def plan_json(plan: Plan, instance: Instance, *, explain: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "algorithm": plan.algorithm,
        "objective": plan.objective,
        "makespan": round(plan.makespan, 6),
        "cost": round(plan.cost, 6),
        "optimal": plan.optimal,
        "notes": list(plan.notes),
        "steps": [
            {
                "step": p.task,
                "variant": p.variant,
                "node": p.machine,
                "node_class": p.machine_class,
                "gpus": list(p.gpus),
                **({"gpu_share": p.share} if p.share else {}),
                **({"mig_device": p.mig_device} if p.mig_device is not None else {}),
                **({"ranks": [{"node": m, "gpus": list(g)} for m, g in p.ranks]} if p.ranks else {}),
                "cores": p.cores,
                "memory": p.memory,
                "start": round(p.start, 6),
                "finish": round(p.finish, 6),
                **({"explain": explain_step(plan, instance, p.task)} if explain else {}),
            }
            for p in sorted(plan.placements.values(), key=lambda p: (p.start, p.task))
        ],
    }
    return out


def explain_step(plan: Plan, instance: Instance, step: str) -> list[dict[str, str]]:
    """``plan.explain``'s verdicts for one step, as rows for JSON and the --explain text."""
    return [
        {"variant": v.variant, "node_class": v.node_class, "verdict": v.verdict, "reason": v.reason}
        for v in explain(plan, instance, step)
    ]


def where(p: Placement) -> tuple[str, str]:
    """NODE and GPUS cells: one node and its GPU indices, or a gang's nodes with how many
    replicas each holds (``gpu-0 x4, gpu-1 x2``) and every replica's GPUs (``0,1|2,3``)."""
    if not p.ranks:
        gpus = ",".join(map(str, p.gpus)) or "-"
        if p.share:
            gpus += f" ({p.share:g})"  # a time-sliced / MPS share of GPU gpus[0]
        elif p.mig_device is not None:
            gpus += f"/mig{p.mig_device}"  # MIG device mig_device of GPU gpus[0]
        return p.machine, gpus
    nodes = ", ".join(f"{m} x{k}" for m, (k, _g) in p.per_machine().items())
    gpus = "|".join(",".join(map(str, g)) for _m, g in p.ranks)
    return nodes, gpus if any(g for _m, g in p.ranks) else "-"


def plan_table(plan: Plan) -> Table | PlainTable:
    if len(plan.placements) > BIG:
        rows = [
            [p.task, p.variant, *where(p), f"{p.start:.1f}", f"{p.finish:.1f}"]
            for p in sorted(plan.placements.values(), key=lambda p: (p.start, p.task))
        ]
        return plain_table(["STEP", "VARIANT", "NODE", "GPUS", "START", "FINISH"], rows)
    t = Table(box=None, header_style="bold")
    for col in ("STEP", "VARIANT", "NODE", "GPUS", "START", "FINISH"):
        t.add_column(col, no_wrap=True)
    for p in sorted(plan.placements.values(), key=lambda p: (p.start, p.task)):
        node, gpus = where(p)
        t.add_row(p.task, p.variant, node, gpus, f"{p.start:.1f}", f"{p.finish:.1f}")
    return t
