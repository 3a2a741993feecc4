"""What the dashboard's JSON API answers, built from the store (opened read-only) and the
same report functions the CLI prints with: a page of runs is ``hetflow ps --json``'s items,
one run is ``hetflow show --json``'s object, a node is ``hetflow nodes --json``'s.  Each
adds only what a page needs and a terminal does not (step counts, the DAG's edges, which
step holds a GPU now)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetflow.errors import HetflowError
from hetflow.execute import RunPlan, load_recorded
from hetflow.inventory import Node
from hetflow.plan import MachineClass
from hetflow.report import node_to_json, params_json, run_json, step_items
from hetflow.spec import edges_of, fanout_parent
from hetflow.state import RUN_TERMINAL, SUCCEEDED, Lease, RunRecord, Store, executor_gone

RUN_STATES = ("pending", "running", "succeeded", "failed", "stopped")
MAX_PAGE = 200
HIDDEN = "***"  # an env value the dashboard does not show (hetflow ui --show-env shows them)


MAX_INT = 2**62  # the largest offset or id a query may give (SQLite's integers are 64-bit)


class BadRequest(HetflowError):
    """A query the API cannot answer as asked (400): the message says what to change."""


class Forbidden(HetflowError):
    """An action the dashboard was not started to allow (403)."""


class Busy(HetflowError):
    """The dashboard is at a limit it keeps (planning, event streams): 503, try again."""


MAX_PARAM = 4096  # characters of one query parameter (a run name filter, a path under --root)


def clean_param(name: str, value: str | None) -> str | None:
    """A text query parameter: a NUL or control character, or one longer than ``MAX_PARAM``, is a 400 naming it."""
    if value is not None and (len(value) > MAX_PARAM or any(ord(c) < 32 for c in value)):
        raise BadRequest(f"{name}={value[:40]!r}: no control characters, at most {MAX_PARAM} characters")
    return value


def int_param(name: str, raw: str | None, default: int, low: int, high: int) -> int:
    """A whole-number query parameter in ``low..high`` (``default`` when absent or empty), else a 400 naming it."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if raw.strip() == raw and len(raw) <= 20 else None
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise BadRequest(f"{name}={raw[:40]!r}: give a whole number from {low} to {high}")
    return value


def _duration(run: RunRecord, now: float | None = None) -> float | None:
    if run.started is None:
        return None
    end = run.ended if run.ended is not None and run.state in RUN_TERMINAL else (now or time.time())
    return max(0.0, end - run.started)


def _planned_cost(store: Store, run_id: str) -> float | None:
    """The planned cost of the run's stored plan, when it has one with prices."""
    text = store.plan_json(run_id)
    if not text:
        return None
    try:
        plan = json.loads(text).get("plan") or {}
        cost = plan.get("cost")
    except (ValueError, AttributeError):
        return None
    return float(cost) if isinstance(cost, int | float) and cost > 0 else None


def page_query(
    state: str | None, name: str | None, limit: str | None, offset: str | None
) -> tuple[str | None, str | None, int, int]:
    """The run list's query parameters, checked: a bad one is a 400 that names it."""
    if state and state not in RUN_STATES:
        raise BadRequest(f"state={state[:40]!r}: use one of {', '.join(RUN_STATES)}")
    clean_param("name", name)
    n = int_param("limit", limit, 50, 1, MAX_PAGE)
    start = int_param("offset", offset, 0, 0, MAX_INT)
    return state or None, name or None, n, start


def runs_page(
    store: Store, cache: RunCache, state: str | None, name: str | None, limit: int, offset: int
) -> dict[str, Any]:
    records, total = store.runs_page(state=state, name=name, limit=limit, offset=offset)
    counts = store.step_counts(r.id for r in records)
    runs = []
    for r in records:
        item = run_json(r, [], executor_gone=executor_gone(r))
        del item["steps"]
        n = counts[r.id]
        item["steps_done"] = n.get(SUCCEEDED, 0)
        item["steps_total"] = sum(n.values())
        item["counts"] = n
        item["progress"] = item["steps_done"] / item["steps_total"] if item["steps_total"] else 0.0
        item["duration"] = _duration(r)
        item["cost"] = cache.cost(store, r.id)
        runs.append(item)
    return {"total": total, "offset": offset, "limit": limit, "runs": runs}


@dataclass(frozen=True)
class Shape:
    """What a run's recorded workflow says that its rows do not: the DAG (nodes with their
    fan-out group and gang size, edges ``[from, to]``: ``to`` needs ``from``) and each
    step's environment as written (values hidden unless the server shows them)."""

    graph: dict[str, Any]
    env: dict[str, dict[str, str]]


@dataclass
class RunCache:
    """What the dashboard reads of a run once, not on every refresh.

    A run's ``Shape`` comes from its recorded workflow (a 2,000-step workflow takes a while
    to load): kept with the number of fan-outs expanded when it was read, since a fan-out
    over an upstream step's output adds steps while the run goes.  A run's planned cost
    comes from the plan stored with it when it was created, which no later write changes;
    the run list asks for it every 2 s."""

    shapes: dict[str, tuple[int, Shape]] = field(default_factory=dict)
    costs: dict[str, float | None] = field(default_factory=dict)

    def shape(self, store: Store, run_id: str, steps: list[str], show_env: bool) -> Shape:
        expanded = len(store.expansions(run_id))
        hit = self.shapes.get(run_id)
        if hit is not None and hit[0] == expanded and len(hit[1].graph["nodes"]) == len(steps):
            return hit[1]
        shape = _shape(store, run_id, steps, show_env)
        self.shapes[run_id] = (expanded, shape)
        return shape

    def cost(self, store: Store, run_id: str) -> float | None:
        if run_id not in self.costs:
            self.costs[run_id] = _planned_cost(store, run_id)
        return self.costs[run_id]


def _shape(store: Store, run_id: str, steps: list[str], show_env: bool) -> Shape:
    """A run whose workflow copy is gone still has its steps: drawn without edges, and
    the graph's note says why."""
    note = ""
    replicas: dict[str, int] = {}
    edges: list[list[str]] = []
    env: dict[str, dict[str, str]] = {}
    try:
        wf = load_recorded(store, run_id).workflow
    except (HetflowError, OSError) as exc:
        note = f"the run's workflow could not be read again ({exc}); steps are shown without their edges"
    else:
        known = set(steps)
        edges = [[dep, name] for name, deps in edges_of(wf).items() for dep in deps if dep in known and name in known]
        replicas = {name: s.replicas for name, s in wf.steps.items() if s.replicas > 1}
        for name, step in wf.steps.items():
            written = dict(step.env)
            for variant in (step.variants or {}).values():
                written.update(variant.env)
            env[name] = {k: (str(v) if show_env else HIDDEN) for k, v in written.items()}
    nodes = [{"id": s, "group": fanout_parent(s), "gang": replicas.get(s)} for s in steps]
    return Shape({"nodes": nodes, "edges": edges, "note": note}, env)


def run_detail(store: Store, run_id: str, cache: RunCache, *, show_env: bool = False) -> dict[str, Any]:
    """``hetflow show --json`` plus the DAG, each step's last image, retries and env names."""
    rid = store.resolve_run_id(run_id)
    record, steps, attempts = store.run(rid), store.steps(rid), store.attempts(rid)
    data = run_json(
        record, steps, attempts, executor_gone=executor_gone(record), items=step_items(store.expansions(rid))
    )
    data["outputs"] = [o.__dict__ for o in store.outputs(rid)]
    data["params"] = params_json(store.run_params(rid))
    data["backend"] = record.backend
    data["duration"] = _duration(record)
    data["cost"] = cache.cost(store, rid)
    data["cursor"] = store.last_event_id(rid)
    shape = cache.shape(store, rid, [s.step for s in steps], show_env)
    data["graph"] = shape.graph
    gangs = {n["id"]: n["gang"] for n in shape.graph["nodes"] if n["gang"]}
    images = {a.step: a.image for a in attempts}
    env = shape.env
    for s in data["steps"]:
        s["image"] = images.get(s["step"])
        s["retries"] = max(0, s["attempts"] - 1)
        s["replicas"] = gangs.get(s["step"], 1)
        s["env"] = env.get(s["step"], env.get(fanout_parent(s["step"]) or "", {}))
    return data


def nodes_json(node: Node, leases: list[Lease]) -> list[dict[str, Any]]:
    """``hetflow nodes --json`` with, per GPU, who holds it now (the store's GPU leases)."""
    data = node_to_json(node)
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    for lease in leases:
        by_uuid.setdefault(lease.gpu_uuid, []).append(
            {
                "run_id": lease.run_id,
                "step": lease.step,
                "attempt": lease.attempt,
                "container": lease.container,
                "mode": lease.mode,
                "share": lease.share,
                "mig": lease.mig,
            }
        )
    gpus: list[dict[str, Any]] = data["gpus"]  # type: ignore[assignment]
    for gpu in gpus:
        gpu["holders"] = by_uuid.get(str(gpu.get("uuid")), [])
    return [data]


LIVE = ("pending", "running")
BUSY = ("launching", "running")


def cluster_nodes(store: Store) -> list[dict[str, Any]]:
    """The nodes of the clusters that live runs were planned on (Slurm, Ray): each run's
    node classes from its stored plan, and the attempts running there now with their
    GPUs, as the Nodes view shows beside this machine (whose GPUs the leases tell)."""
    out = []
    for state in LIVE:
        records, _ = store.runs_page(state=state, limit=MAX_PAGE)
        for run in records:
            if run.backend == "local":
                continue
            text = store.plan_json(run.id)
            try:
                classes = RunPlan.from_json(text).classes if text else ()
            except (ValueError, KeyError, TypeError):
                classes = ()
            busy = [
                {"node": a.node, "gpus": list(a.gpus), "run_id": run.id, "step": a.step, "attempt": a.attempt}
                for a in store.attempts(run.id)
                if a.state in BUSY
            ]
            out.append(
                {
                    "run_id": run.id,
                    "name": run.name,
                    "backend": run.backend,
                    "state": run.state,
                    "classes": [_class_json(c) for c in classes],
                    "busy": busy,
                }
            )
    return out


def _class_json(c: MachineClass) -> dict[str, Any]:
    return {
        "name": c.name,
        "count": c.count,
        "cores": c.cores,
        "memory": c.memory,
        "gpus": c.gpus,
        "gpu_model": c.gpu_model,
        "gpu_memory": c.gpu_memory or None,  # 0: not given in the cluster file
        "gpu_cc": ".".join(map(str, c.gpu_cc)) if c.gpus and c.gpu_cc != (0, 0) else "",
        "gpu_vendor": c.gpu_vendor if c.gpus else "",
        "gpu_arch": c.gpu_arch,
        "gpu_link": c.gpu_link,
        "gpu_sharing": c.gpu_sharing.describe() if c.gpus else "",
        "mig": list(c.mig),
        "price_per_hour": c.price_per_hour,
    }


KINDS = {"Workflow": "workflows", "Cluster": "clusters", "Catalog": "catalogs"}
MAX_DEPTH = 4
SKIP_DIRS = {".git", ".venv", "node_modules", ".hetflow", "__pycache__", ".mypy_cache", ".ruff_cache"}


def yaml_files(root: Path) -> dict[str, list[str]]:
    """The workflow, cluster and catalog files under ``root`` (by their ``kind:``), for the
    plans view's pickers; paths relative to ``root``."""
    out: dict[str, list[str]] = {v: [] for v in KINDS.values()}
    root = root.resolve()

    def walk(d: Path, depth: int) -> None:
        try:
            entries = sorted(d.iterdir())
        except OSError:
            return
        for p in entries:
            if p.is_dir() and not p.is_symlink():
                if depth < MAX_DEPTH and p.name not in SKIP_DIRS:
                    walk(p, depth + 1)
            elif p.suffix in (".yaml", ".yml") and p.is_file():
                kind = _kind(p)
                if kind in KINDS:
                    out[KINDS[kind]].append(str(p.relative_to(root)))

    walk(root, 0)
    return out


def _kind(path: Path) -> str | None:
    """A file's top-level ``kind:``; a workflow has none, only ``apiVersion: hetflow/v1``."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return None
    api = False
    for line in head.splitlines():
        if line.startswith("kind:"):
            return line.split(":", 1)[1].strip().strip("'\"")
        api = api or line.replace(" ", "") in (
            "apiVersion:hetflow/v1",
            "apiVersion:'hetflow/v1'",
            'apiVersion:"hetflow/v1"',
        )
    return "Workflow" if api else None


def under_root(root: Path, rel: str | None, what: str) -> Path:
    """A file the API may read: given, existing, and inside ``root`` (no ``..`` or links out)."""
    if not rel:
        raise BadRequest(f"give {what}=PATH (a file under {root}; /api/files lists them)")
    clean_param(what, rel)
    base = root.resolve()
    path = (base / rel).resolve()
    if not path.is_relative_to(base):
        raise BadRequest(f"{what}={rel!r} is outside {base}; give a path under it")
    if not path.is_file():
        raise BadRequest(f"{what}={rel!r}: no such file under {base}")
    return path
