"""A plan for people (a table, and per-step explanations) and for scripts (JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hetflow.plan.instance import Instance, Plan


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
    """Why every other (variant, node class) lost or was rejected: filter rejections with
    their reasons, then feasible options scored against the chosen one."""
    chosen = plan.placements[step]
    task = instance.task(step)
    chosen_rt = chosen.finish - chosen.start
    rows: list[dict[str, str]] = []
    for r in task.rejected:
        rows.append({"variant": r.variant, "node_class": r.machine_class, "verdict": "rejected", "reason": r.reason})
    for o in task.options:
        if o.variant == chosen.variant and o.machine_class == chosen.machine_class:
            continue
        if o.runtime > chosen_rt + 1e-9:
            why = f"runs {o.runtime:.4g}s there vs {chosen_rt:.4g}s for the choice"
        elif o.runtime < chosen_rt - 1e-9:
            why = (
                f"faster there ({o.runtime:.4g}s vs {chosen_rt:.4g}s) but the schedule finishes sooner or cheaper "
                "with the choice (its nodes were busy, its data were elsewhere, or the GPU policy kept it off)"
            )
        else:
            why = "as fast there; the choice finished no later (ties go to the earlier node class)"
        rows.append({"variant": o.variant, "node_class": o.machine_class, "verdict": "lost", "reason": why})
    return rows


def plan_table(plan: Plan) -> Table:
    t = Table(box=None, header_style="bold")
    for col in ("STEP", "VARIANT", "NODE", "GPUS", "START", "FINISH"):
        t.add_column(col, no_wrap=True)
    for p in sorted(plan.placements.values(), key=lambda p: (p.start, p.task)):
        gpus = ",".join(map(str, p.gpus)) or "-"
        t.add_row(p.task, p.variant, p.machine, gpus, f"{p.start:.1f}", f"{p.finish:.1f}")
    return t
