"""A plan for people (a table, and per-step explanations) and for scripts (JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hetflow.plan import Instance, Plan, explain
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


def plan_table(plan: Plan) -> Table | PlainTable:
    if len(plan.placements) > BIG:
        rows = [
            [p.task, p.variant, p.machine, ",".join(map(str, p.gpus)) or "-", f"{p.start:.1f}", f"{p.finish:.1f}"]
            for p in sorted(plan.placements.values(), key=lambda p: (p.start, p.task))
        ]
        return plain_table(["STEP", "VARIANT", "NODE", "GPUS", "START", "FINISH"], rows)
    t = Table(box=None, header_style="bold")
    for col in ("STEP", "VARIANT", "NODE", "GPUS", "START", "FINISH"):
        t.add_column(col, no_wrap=True)
    for p in sorted(plan.placements.values(), key=lambda p: (p.start, p.task)):
        gpus = ",".join(map(str, p.gpus)) or "-"
        t.add_row(p.task, p.variant, p.machine, gpus, f"{p.start:.1f}", f"{p.finish:.1f}")
    return t
