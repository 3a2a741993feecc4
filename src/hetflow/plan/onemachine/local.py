"""Planning a run on this one machine, so the local runner follows the planner.

The machine is a cluster of one class (``cluster.node_class``); measured history wins
over written estimates.  The runner takes the plan's variant per step and dispatches
ready steps in the plan's order, starting each as soon as it can rather than at its
planned time, so a step that runs long or short shifts the rest instead of stalling it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetflow.inventory import Node
from hetflow.plan.build import build_instance
from hetflow.plan.explanation import explain
from hetflow.plan.instance import Plan
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.sizing.cluster import node_class
from hetflow.spec import Workflow

LOCAL_BANDWIDTH = 1.25e9  # unused on one machine (no edge crosses machines), but must be > 0


@dataclass(frozen=True)
class LocalPlan:
    plan: Plan
    variants: dict[str, str]
    priority: dict[str, float]
    reasons: dict[str, str]


def plan_local(
    workflow: Workflow, node: Node, profile: Mapping[tuple[str, str, str], float] | None = None
) -> LocalPlan:
    instance = build_instance(workflow, [node_class(node)], bandwidth=LOCAL_BANDWIDTH, profile=profile)
    plan = plan_heuristic(instance)
    reasons = {}
    for step, p in plan.placements.items():
        lost = [f"{v.variant} {v.verdict}: {v.reason}" for v in explain(plan, instance, step)]
        runtime = p.finish - p.start
        reasons[step] = f"est. {runtime:.4g}s" + (f"; {'; '.join(lost)}" if lost else "")
    return LocalPlan(
        plan=plan,
        variants={s: p.variant for s, p in plan.placements.items()},
        priority={s: p.start for s, p in plan.placements.items()},
        reasons=reasons,
    )
