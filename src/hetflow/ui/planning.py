"""The plans view's answers: ``hetflow plan --json --explain`` and ``hetflow cluster plan
--json`` for files under the dashboard's root, computed as those commands compute them
(same loader, same instance, same planners); nothing is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetflow.execute import cluster_instance, expand_for_planning
from hetflow.plan import ClusterPoint, load_catalog, load_cluster, plan_heuristic, plan_virtual_cluster
from hetflow.report import gantt_svg, plan_json
from hetflow.spec import LoadedWorkflow, load_workflow
from hetflow.state import Store
from hetflow.ui.views import BadRequest

OBJECTIVES = ("makespan", "cost")
Counts = tuple[tuple[str, int], ...]  # a cluster: (node type, how many) for each type rented


def _load(workflow: Path) -> LoadedWorkflow:
    return expand_for_planning(load_workflow(workflow, {}))


def plan_answer(store: Store, workflow: Path, cluster: Path, objective: str) -> dict[str, Any]:
    """The plan with every step's rejected choices, and its Gantt chart."""
    if objective not in OBJECTIVES:
        raise BadRequest(f"objective={objective!r}: use makespan or cost")
    loaded = _load(workflow)
    instance = cluster_instance(store, loaded, load_cluster(cluster))
    plan = plan_heuristic(instance, objective=objective)
    data = plan_json(plan, instance, explain=True)
    data["gantt_svg"] = gantt_svg(plan, instance, title=f"{loaded.workflow.name} on {cluster.name}")
    return data


def _point(i: int, p: ClusterPoint, frontier: set[Counts], chosen: Counts | None) -> dict[str, Any]:
    steps = [
        {
            "step": q.task,
            "variant": q.variant,
            "node": q.machine,
            "gpus": list(q.gpus),
            "start": round(q.start, 6),
            "finish": round(q.finish, 6),
        }
        for q in sorted(p.plan.placements.values(), key=lambda q: (q.start, q.task))
    ]
    return {
        "index": i,
        **p.to_json(),
        "frontier": p.counts in frontier,
        "chosen": p.counts == chosen,
        "plan": steps,
    }


def pareto_answer(workflow: Path, catalog: Path) -> dict[str, Any]:
    """Every cluster the virtual-cluster search planned, the frontier and the chosen one
    marked, each with its plan (the chart's points, clicked to show one)."""
    loaded = _load(workflow)
    cat = load_catalog(catalog)
    result = plan_virtual_cluster(loaded.workflow, cat.classes(), bandwidth=cat.bandwidth_bytes)
    data = result.to_json()
    frontier = {p.counts for p in result.frontier}
    chosen = result.chosen.counts if result.chosen is not None else None
    points = list(result.points) or list(result.frontier)
    data["points"] = [_point(i, p, frontier, chosen) for i, p in enumerate(points)]
    return data
