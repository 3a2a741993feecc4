"""Planner figures on the workloads of shared/bench/README.md, each against anchors from the
same run.

1. One table, per instance (the Topcuoglu graph and the five WfInstances traces):
   * on ``hetero-16`` with GPU variants (bench rules 2 and 3): hetflow's planner against
     greedy first fit (what a default Kubernetes scheduler gives), the lower bound, the
     ratio to it, the dollar cost and the planning time;
   * in SAGA mode (CPU variants only, every node a single processor of its type's speed,
     1.25 GB/s): hetflow's planner against SAGA's HEFT, CPOP and MinMin (anrg-saga), each
     SAGA schedule translated back and checked with ``check_plan``.
   The Topcuoglu graph is its own model (3 unrelated processors, bandwidth 1), so both
   modes are that one instance; SAGA's HEFT must give the published 80 there, which
   checks the translation.
2. The geometric-mean makespan reduction of hetflow over greedy first fit on hetero-16.
3. Planning time at scale: a 2,000-step and a 10,000-step workflow from the ``wfcommons``
   generator (Montage and Epigenomics recipes, seeded) on hetero-16 scaled to 64 and 256
   nodes, with greedy first fit and plain HEFT timed in the same run as anchors.

    pip install -e '.[bench]'
    python -m bench.planner [--no-saga] [--no-scale] [--seed 0]

Timings are wall-clock on this machine, single-threaded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from hetflow.plan.baseline import greedy_first_fit
from hetflow.plan.bounds import lower_bound
from hetflow.plan.build import build_instance
from hetflow.plan.cluster import load_cluster
from hetflow.plan.cost import plan_cost
from hetflow.plan.heuristic import heft, plan_heuristic
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Placement, Plan, Task
from hetflow.plan.validate import check_plan
from hetflow.spec.wfcommons import workflow_from_wfcommons

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "bench"  # the shared benchmark beside the checkout: canonical/, wfinstances/
HETERO16 = ROOT / "examples" / "clusters" / "hetero-16.yaml"
TRACES = (
    "1000genome-chameleon-2ch-100k-001",
    "montage-chameleon-2mass-005d-001",
    "blast-chameleon-medium-001",
    "bwa-chameleon-large-001",
    "epigenomics-chameleon-ilmn-6seq-50k-001",
)
SAGA_NAMES = ("HEFT", "CPOP", "MinMin")
TOPCUOGLU_HEFT = 80.0  # published (Topcuoglu et al. 2002, Fig. 2)


# --- instances --------------------------------------------------------------------------


def topcuoglu_instance() -> Instance:
    """The HEFT paper's graph: 3 unrelated processors, cost[task][proc], bandwidth 1."""
    data = json.loads((DATA / "canonical" / "topcuoglu2002.json").read_text())
    procs = data["processors"]
    classes = tuple(MachineClass(p, count=1, cores=1, memory=1) for p in procs)
    tasks = tuple(
        Task(name, tuple(Option("default", p, float(c), 1.0, 0) for p, c in zip(procs, costs, strict=True)))
        for name, costs in data["cost"].items()
    )
    edges = tuple(Edge(a, b, float(w)) for a, b, w in data["edges"])
    return Instance(tasks, edges, classes, bandwidth=1.0, one_task_per_machine=True)


def trace_instances(
    trace: dict[str, Any], classes: tuple[MachineClass, ...], bandwidth: float
) -> tuple[Instance, Instance]:
    """(hetero-16 with GPU variants, SAGA mode: CPU variants, one task per machine)."""
    het = build_instance(workflow_from_wfcommons(trace), classes, bandwidth=bandwidth)
    saga = build_instance(
        workflow_from_wfcommons(trace, gpu_variants=False), classes, bandwidth=bandwidth, one_task_per_machine=True
    )
    return het, saga


# --- SAGA -------------------------------------------------------------------------------
# SAGA's model (saga/__init__.py, anrg-saga 2.0.2): a task's run time on a node is
# ``task.cost / node.speed`` and a transfer ``size / edge.speed``; schedulers take a
# ``Network`` (nodes with speeds, every pair linked, a node to itself at infinite speed) and
# a ``TaskGraph``.  A hetflow instance in SAGA mode is exactly that with cost = the CPU
# estimate (run time x class speed).  Unrelated machines (the Topcuoglu graph) do not fit
# cost / speed, so there a task's cost is its row of run times and a node's speed names the
# node: dividing one by the other looks the time up.  Only the arithmetic is overloaded;
# SAGA's code runs unchanged.


class _Proc:
    """Stands for a node's speed on unrelated machines: ``_Row / _Proc`` is a lookup."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __add__(self, other: object) -> _ProcSum:
        return _ProcSum([self]) + other

    __radd__ = __add__


class _ProcSum:
    """A sum of ``_Proc`` (``np.mean`` over nodes adds, then divides by the count)."""

    def __init__(self, items: list[_Proc]) -> None:
        self.items = items

    def __add__(self, other: object) -> _ProcSum:
        more = other.items if isinstance(other, _ProcSum) else [other] if isinstance(other, _Proc) else []
        return _ProcSum(self.items + more)

    __radd__ = __add__

    def __truediv__(self, n: object) -> _ProcSum:
        return self  # a mean over nodes; _Row averages its row over these nodes


class _Row:
    """A task's run time per node; divided by a node (``_Proc``) gives that node's time, by
    a mean of nodes (CPOP's mean speed) the mean time, as in the paper."""

    def __init__(self, row: dict[str, float]) -> None:
        self.row = row

    def __truediv__(self, speed: object) -> float:
        if isinstance(speed, _Proc):
            return self.row[speed.name]
        if isinstance(speed, _ProcSum):
            return sum(self.row[p.name] for p in speed.items) / len(speed.items)
        raise TypeError(f"cannot divide a run-time row by {speed!r}")


def _machines(instance: Instance) -> dict[str, MachineClass]:
    return {m: c for c in instance.classes for m in c.machine_ids()}


def saga_graphs(instance: Instance) -> tuple[Any, Any]:
    """SAGA's ``Network`` and ``TaskGraph`` for a one-task-per-machine, one-variant instance."""
    from saga import Network, TaskGraph  # type: ignore[import-untyped]

    machines = _machines(instance)
    rows: dict[str, dict[str, float]] = {}
    for t in instance.tasks:
        if len({o.variant for o in t.options}) != 1 or {o.machine_class for o in t.options} != {
            c.name for c in instance.classes
        }:
            raise ValueError(f"task {t.name!r}: SAGA needs one variant that runs on every node")
        by_class = {o.machine_class: o.runtime for o in t.options}
        rows[t.name] = {m: by_class[c.name] for m, c in machines.items()}
    work = {name: {row[m] * c.speed for m, c in machines.items()} for name, row in rows.items()}
    related = all(max(w) - min(w) <= 1e-9 * max(1.0, max(w)) for w in work.values())
    graph = TaskGraph.create(
        [(name, min(w) if related else 0.0) for name, w in work.items()],
        [(e.parent, e.child, e.bytes) for e in instance.edges],
    )
    ids = list(machines)
    network = Network.create(
        [(m, machines[m].speed) for m in ids],
        [(a, b, instance.bandwidth) for i, a in enumerate(ids) for b in ids[i + 1 :]],
    )
    if not related:
        for task in graph.tasks:
            if task.name in rows:
                task.cost = _Row(rows[task.name])
        for node in network.nodes:
            node.speed = _Proc(node.name)
    return network, graph


def saga_plan(instance: Instance, algorithm: str) -> Plan:
    """Run SAGA's scheduler and translate its schedule into a hetflow ``Plan``."""
    from saga.schedulers import CpopScheduler, HeftScheduler, MinMinScheduler  # type: ignore[import-untyped]

    scheduler = {"HEFT": HeftScheduler, "CPOP": CpopScheduler, "MinMin": MinMinScheduler}[algorithm]()
    network, graph = saga_graphs(instance)
    schedule = scheduler.schedule(network, graph)
    machines = _machines(instance)
    placements: dict[str, Placement] = {}
    for node, items in schedule.items():
        cls = machines[node]
        for s in items:
            if s.name.startswith("__super_"):  # SAGA's zero-cost single source / sink
                continue
            o = next(o for o in instance.task(s.name).options if o.machine_class == cls.name)
            placements[s.name] = Placement(s.name, o.variant, node, cls.name, s.start, s.end, o.cores, o.memory)
    makespan = max(p.finish for p in placements.values())
    return Plan(placements, makespan, plan_cost(instance, placements), f"saga-{algorithm.lower()}")


# --- measuring --------------------------------------------------------------------------


def timed(fn: Callable[[], Plan]) -> tuple[Plan, float]:
    t0 = time.perf_counter()
    plan = fn()
    return plan, time.perf_counter() - t0


def checked(instance: Instance, plan: Plan, what: str) -> Plan:
    problems = check_plan(instance, plan)
    if problems:
        sys.exit(f"bench: {what}: the plan is invalid:\n  " + "\n  ".join(problems[:10]))
    return plan


@dataclass
class Row:
    name: str
    steps: int
    gpu_steps: int
    hetflow: float
    greedy: float
    saga: dict[str, float | None]
    hetflow_saga: float
    lb: float
    cost: float
    cost_greedy: float
    plan_s: float
    plan_saga_s: float

    @property
    def best_saga(self) -> float | None:
        done = [v for v in self.saga.values() if v is not None]
        return min(done) if done else None


def measure(name: str, het: Instance, saga_mode: Instance, *, seed: int, with_saga: bool) -> Row:
    plan, plan_s = timed(lambda: plan_heuristic(het, seed=seed))
    checked(het, plan, f"{name}: hetflow")
    greedy = checked(het, greedy_first_fit(het), f"{name}: greedy")
    if saga_mode is het:
        plan_saga, plan_saga_s = plan, plan_s
    else:
        plan_saga, plan_saga_s = timed(lambda: plan_heuristic(saga_mode, seed=seed))
        checked(saga_mode, plan_saga, f"{name}: hetflow in SAGA mode")
    saga: dict[str, float | None] = dict.fromkeys(SAGA_NAMES)
    if with_saga:
        for algo in SAGA_NAMES:
            saga[algo] = checked(saga_mode, saga_plan(saga_mode, algo), f"{name}: SAGA {algo}").makespan
    gpu_steps = sum(1 for t in het.tasks if any(o.gpus for o in t.options))
    return Row(
        name,
        len(het.tasks),
        gpu_steps,
        plan.makespan,
        greedy.makespan,
        saga,
        plan_saga.makespan,
        lower_bound(het),
        plan.cost,
        greedy.cost,
        plan_s,
        plan_saga_s,
    )


def _f(v: float | None, width: int, digits: int = 1) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:{width}.{digits}f}"


def print_table(rows: list[Row]) -> None:
    print(
        "\nMakespans in seconds.  hetero-16 columns: GPU variants, shared machines (cores, memory, GPUs).\n"
        "SAGA-mode columns: CPU variants only, one task per node, node speed = its type's, 1.25 GB/s.\n"
        "(topcuoglu: its own 3 unrelated processors, bandwidth 1, in every column.)"
    )
    head = (
        f"{'instance':<12} {'steps':>5} {'gpu':>4} | {'hetflow':>8} {'greedy':>8} {'LB':>8} {'het/LB':>6} "
        f"{'$ het':>7} {'$ greedy':>8} {'plan s':>6} | {'SAGA HEFT':>9} {'CPOP':>8} {'MinMin':>8} "
        f"{'hetflow':>8} {'<=best':>6} {'plan s':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        best = r.best_saga
        ok = "-" if best is None else ("yes" if r.hetflow_saga <= best * (1 + 1e-9) else "NO")
        print(
            f"{r.name:<12} {r.steps:>5} {r.gpu_steps:>4} | {_f(r.hetflow, 8)} {_f(r.greedy, 8)} {_f(r.lb, 8)} "
            f"{r.hetflow / r.lb:6.2f} {_f(r.cost, 7, 2)} {_f(r.cost_greedy, 8, 2)} {_f(r.plan_s, 6, 2)} | "
            f"{_f(r.saga['HEFT'], 9)} {_f(r.saga['CPOP'], 8)} {_f(r.saga['MinMin'], 8)} "
            f"{_f(r.hetflow_saga, 8)} {ok:>6} {_f(r.plan_saga_s, 6, 2)}"
        )


# --- scale ------------------------------------------------------------------------------


def generated_trace(recipe: str, tasks: int, seed: int) -> dict[str, Any]:
    """A WfFormat document from the ``wfcommons`` generator, seeded; its random (uuid4) file
    names are replaced by names in order of appearance so the document is the same every run."""
    from wfcommons import WorkflowGenerator  # type: ignore[import-untyped]
    from wfcommons.wfchef import recipes  # type: ignore[import-untyped]

    random.seed(seed)
    import numpy as np

    np.random.seed(seed)
    recipe_cls = getattr(recipes, recipe)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        wf = WorkflowGenerator(recipe_cls.from_num_tasks(tasks)).build_workflow()
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-") as tmp:
        path = Path(tmp) / "generated.json"
        wf.write_json(path)
        data: dict[str, Any] = json.loads(path.read_text())
    spec = data["workflow"]["specification"]
    names: dict[str, str] = {}
    for t in spec["tasks"]:
        for f in (*t.get("inputFiles", ()), *t.get("outputFiles", ())):
            names.setdefault(f, f"file{len(names):06d}")
    for t in spec["tasks"]:
        t["inputFiles"] = [names[f] for f in t.get("inputFiles", ())]
        t["outputFiles"] = [names[f] for f in t.get("outputFiles", ())]
    spec["files"] = [{**f, "id": names.get(f["id"], f["id"])} for f in spec.get("files", [])]
    return data


def scaled(classes: tuple[MachineClass, ...], factor: int) -> tuple[MachineClass, ...]:
    return tuple(replace(c, count=c.count * factor) for c in classes)


def scale_table(classes: tuple[MachineClass, ...], bandwidth: float, seed: int) -> None:
    cases = [("MontageRecipe", 2000, 4), ("EpigenomicsRecipe", 10000, 16)]
    print(
        "\nPlanning time at scale (wfcommons generator, seeded; GPU variants per bench rule 3; "
        "hetero-16 with every count multiplied).\nAnchors from the same run: greedy first fit and "
        "plain HEFT (hetflow.plan.heuristic.heft) on the same instance."
    )
    head = (
        f"{'workflow':<22} {'steps':>6} {'nodes':>5} {'build s':>7} | {'greedy s':>8} {'HEFT s':>7} "
        f"{'hetflow s':>9} | {'greedy':>8} {'HEFT':>8} {'hetflow':>8} {'LB':>8}"
    )
    print(head)
    print("-" * len(head))
    for recipe, n, factor in cases:
        trace = generated_trace(recipe, n, seed)
        cls = scaled(classes, factor)
        t0 = time.perf_counter()
        inst = build_instance(workflow_from_wfcommons(trace), cls, bandwidth=bandwidth)
        build_s = time.perf_counter() - t0
        greedy, greedy_s = timed(partial(greedy_first_fit, inst))
        plain, heft_s = timed(partial(heft, inst))
        plan, plan_s = timed(partial(plan_heuristic, inst, seed=seed))
        for p in (greedy, plain, plan):
            checked(inst, p, f"{recipe} {n}: {p.algorithm}")
        label = f"{recipe.removesuffix('Recipe').lower()} {n}"
        print(
            f"{label:<22} {len(inst.tasks):>6} {sum(c.count for c in cls):>5} {build_s:7.2f} | "
            f"{greedy_s:8.2f} {heft_s:7.2f} {plan_s:9.2f} | {greedy.makespan:8.1f} {plain.makespan:8.1f} "
            f"{plan.makespan:8.1f} {lower_bound(inst):8.1f}"
        )


# --- main -------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-saga", action="store_true", help="skip SAGA's schedulers (anrg-saga not needed)")
    ap.add_argument("--no-scale", action="store_true", help="skip the 2,000- and 10,000-step timings")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # SAGA warns on every multi-source graph
    with_saga = not args.no_saga
    if with_saga:
        try:
            import saga  # noqa: F401
        except ImportError:
            sys.exit("bench: anrg-saga is not installed; pip install -e '.[bench]' (or pass --no-saga)")

    cluster = load_cluster(HETERO16)
    classes, bandwidth = cluster.classes(), cluster.bandwidth_bytes
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; seed {args.seed}")

    rows: list[Row] = []
    topc = topcuoglu_instance()
    rows.append(measure("topcuoglu", topc, topc, seed=args.seed, with_saga=with_saga))
    for name in TRACES:
        trace = json.loads((DATA / "wfinstances" / f"{name}.json").read_text())
        het, saga_mode = trace_instances(trace, classes, bandwidth)
        rows.append(measure(name.split("-")[0], het, saga_mode, seed=args.seed, with_saga=with_saga))
    print_table(rows)

    traces = rows[1:]
    ratios = [r.hetflow / r.greedy for r in traces]
    gmean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print(
        f"\ngeometric-mean makespan reduction, hetflow vs greedy first fit on hetero-16 "
        f"({len(traces)} traces): {1 - gmean:.1%} (target >= 25%)"
    )
    if with_saga:
        heft80 = rows[0].saga["HEFT"]
        verdict = "ok" if heft80 is not None and abs(heft80 - TOPCUOGLU_HEFT) < 1e-9 else "MAPPING WRONG"
        print(f"SAGA's HEFT on the Topcuoglu graph: {heft80:g} (published {TOPCUOGLU_HEFT:g}): {verdict}")
        worse = [r.name for r in rows if r.best_saga is not None and r.hetflow_saga > r.best_saga * (1 + 1e-9)]
        print(
            "hetflow in SAGA mode no worse than the best of SAGA's HEFT, CPOP and MinMin: "
            + ("on every instance" if not worse else f"NOT on {', '.join(worse)}")
        )
    if not args.no_scale:
        try:
            import wfcommons  # noqa: F401
        except ImportError:
            print("\nscale: the wfcommons package is not installed; pip install -e '.[bench]'")
        else:
            scale_table(classes, bandwidth, args.seed)


if __name__ == "__main__":
    main()
