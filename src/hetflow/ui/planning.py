"""The plans view's answers: ``hetflow plan --json --explain`` and ``hetflow cluster plan
--json`` for files under the dashboard's root, computed as those commands compute them
(same loader, same instance, same planners); nothing is stored."""

from __future__ import annotations

import glob
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from hetflow.execute import cluster_instance, expand_for_planning
from hetflow.plan import ClusterPoint, load_catalog, load_cluster, plan_heuristic, plan_virtual_cluster
from hetflow.report import gantt_svg, plan_json
from hetflow.spec import LoadedWorkflow, read_yaml_text
from hetflow.state import Store, load_workflow_cached
from hetflow.ui.views import BadRequest, Busy

OBJECTIVES = ("makespan", "cost")
Counts = tuple[tuple[str, int], ...]  # a cluster: (node type, how many) for each type rented
CACHED = 32  # answers kept, by the digests of the files they were planned from
CACHE_SECONDS = 60.0  # a plan also reads the store's measured step times: kept this long at most


def _inside(root: Path, path: Path, what: str) -> None:
    try:
        resolved = path.resolve()
    except (OSError, ValueError) as exc:
        raise BadRequest(f"{what} {str(path)!r}: not a path the dashboard can read ({exc})") from None
    if not resolved.is_relative_to(root):
        raise BadRequest(
            f"{what} {str(path)!r} resolves to {resolved}, outside --root {root}; only files under it are read"
        )


def _includes(workflow: Path, root: Path) -> list[Path]:
    """The files the workflow's ``include:`` names, each checked to lie under ``root`` before
    the loader reads it (a workflow under --root must not make the dashboard read outside)."""
    try:
        data = yaml.safe_load(read_yaml_text(workflow, "a workflow YAML"))
    except yaml.YAMLError:
        return []  # the loader reports the YAML error with its line
    includes = data.get("include") if isinstance(data, dict) else None
    paths = []
    for inc in includes if isinstance(includes, list) else []:
        if isinstance(inc, str):
            path = Path(inc) if inc.startswith("/") else workflow.parent / inc
            _inside(root, path, f"{workflow.name}: include")
            paths.append(path)
    return paths


def _fixed_part(pattern: str) -> Path:
    """The directory a glob lists (its path before the first wildcard), or the path itself."""
    if not glob.has_magic(pattern):
        return Path(pattern)
    first = min(i for i in (pattern.find(c) for c in "*?[") if i >= 0)
    return Path(pattern[:first].rsplit("/", 1)[0] or "/")


def _load(workflow: Path, root: Path) -> LoadedWorkflow:
    _includes(workflow, root)
    loaded = load_workflow_cached(workflow, {})
    for name, ds in loaded.workflow.data.items():
        if ds.path is not None:  # a file, directory or glob (its fixed part) under root; S3 data is not read to plan
            _inside(root, _fixed_part(ds.path), f"{workflow.name}: data {name!r} path")
    return expand_for_planning(loaded)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p).encode() + b"\0")
        try:
            with p.open("rb") as f:  # in chunks: a big file under --root is not read into memory
                h.update(hashlib.file_digest(f, "sha256").digest())
        except OSError:
            h.update(b"missing")
    return h.hexdigest()


class Planner:
    """The plans view's work, bounded: at most ``limit`` plans computed at once (a request
    beyond that is a 503 to retry, not a queue of threads), and answers kept by the digests of
    the workflow, its includes and the cluster or catalog file, for ``CACHE_SECONDS``."""

    def __init__(self, root: Path, limit: int = 2) -> None:
        self.root, self.limit = root, limit
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, ...], tuple[float, dict[str, Any]]] = OrderedDict()

    def _answer(self, key: tuple[str, ...], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and time.monotonic() - hit[0] < CACHE_SECONDS:
                return hit[1]
        if not self._slots.acquire(blocking=False):
            raise Busy(f"{self.limit} plans are being computed; try again in a few seconds")
        try:
            data = compute()
        finally:
            self._slots.release()
        with self._lock:
            self._cache[key] = (time.monotonic(), data)
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        return data

    def plan(self, store: Store, workflow: Path, cluster: Path, objective: str) -> dict[str, Any]:
        if objective not in OBJECTIVES:
            raise BadRequest(f"objective={objective!r}: use makespan or cost")
        key = ("plan", objective, _digest([workflow, cluster, *_includes(workflow, self.root)]))
        return self._answer(key, lambda: plan_answer(store, workflow, cluster, objective, self.root))

    def pareto(self, workflow: Path, catalog: Path) -> dict[str, Any]:
        key = ("pareto", _digest([workflow, catalog, *_includes(workflow, self.root)]))
        return self._answer(key, lambda: pareto_answer(workflow, catalog, self.root))


def plan_answer(store: Store, workflow: Path, cluster: Path, objective: str, root: Path) -> dict[str, Any]:
    """The plan with every step's rejected choices, and its Gantt chart."""
    if objective not in OBJECTIVES:
        raise BadRequest(f"objective={objective!r}: use makespan or cost")
    loaded = _load(workflow, root)
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


def pareto_answer(workflow: Path, catalog: Path, root: Path) -> dict[str, Any]:
    """Every cluster the virtual-cluster search planned, the frontier and the chosen one
    marked, each with its plan (the chart's points, clicked to show one)."""
    loaded = _load(workflow, root)
    cat = load_catalog(catalog)
    result = plan_virtual_cluster(loaded.workflow, cat.classes(), bandwidth=cat.bandwidth_bytes)
    data = result.to_json()
    frontier = {p.counts for p in result.frontier}
    chosen = result.chosen.counts if result.chosen is not None else None
    points = list(result.points) or list(result.frontier)
    data["points"] = [_point(i, p, frontier, chosen) for i, p in enumerate(points)]
    return data
