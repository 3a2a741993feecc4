"""Planner figures on the workloads of bench/data/README.md, each against anchors from the
same run.

1. The baseline table, per instance (the Topcuoglu graph and the five WfInstances traces),
   on ``hetero-16`` with GPU variants (bench rules 2 and 3): hetflow's planner against plain
   HEFT (``heuristic.heft``), a kube-scheduler-style baseline (``plan.baselines.kubesched``: default
   filter and LeastAllocated + BalancedAllocation scores, pods in queue order), a
   Slurm-style one (``plan.baselines.backfill``: age priority, EASY backfill) and first fit in
   cluster order (``plan.baselines.firstfit``), each as makespan and makespan / LB, where LB is the
   strong bound ``lower_bound(strong=True)`` (``plan.bounds.lower``: the LP of ``plan.bounds.lpbound``,
   option pruning, area with heads and tails, GPU steps in whole rounds); the closed-form
   LB of bench rule "Lower bound" (with its GPU term) is printed beside it.
2. The SAGA table (CPU variants only, every node a single processor of its type's speed,
   1.25 GB/s): SAGA's HEFT, CPOP and MinMin (anrg-saga, run here, each schedule translated
   back and checked with ``check_plan``) against hetflow with ``tie_break="saga"`` (SAGA's
   task order for equal ranks and SAGA's rank pass) and with its own default
   (``tie_break="hetflow"``).  The Topcuoglu graph is its own model (3 unrelated
   processors, bandwidth 1) in both tables; SAGA's HEFT must give the published 80 there,
   which checks the translation (bench/planning/planner_saga.py).
3. Geometric-mean makespan reductions of hetflow over HEFT and over each baseline.
4. The scale table: generated workflows (``wfcommons``, several recipes, seeded) of 1,000 to
   10,000 steps on hetero-16 scaled to 64 and 256 nodes: makespan / LB of every planner and
   baseline, and their planning times, with the same geometric means.

    pip install -e '.[bench]'
    python -m bench.planning.planner [--no-saga] [--no-scale] [--seed 0]

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
from pathlib import Path
from typing import Any

from bench.data import DATA
from bench.planning.planner_saga import saga_plan
from bench.speedrow import Row as SpeedRow
from bench.speedrow import emit
from hetflow.plan.baselines.backfill import slurm_backfill
from hetflow.plan.baselines.firstfit import greedy_first_fit
from hetflow.plan.baselines.kubesched import kube_scheduler
from hetflow.plan.bounds.lower import gpu_bound, lower_bound
from hetflow.plan.build import build_instance
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Plan, Task
from hetflow.plan.search.heuristic import heft, plan_heuristic
from hetflow.plan.sizing.cluster import load_cluster
from hetflow.spec.load.wfcommons import workflow_from_wfcommons

ROOT = Path(__file__).resolve().parents[2]
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


# The columns of the baseline and scale tables, in order: what each runs.
PLANNERS: tuple[tuple[str, Callable[[Instance, int], Plan]], ...] = (
    ("hetflow", lambda inst, seed: plan_heuristic(inst, seed=seed)),
    ("HEFT", lambda inst, seed: heft(inst)),
    ("kube", lambda inst, seed: kube_scheduler(inst, seed=seed)),
    ("slurm", lambda inst, seed: slurm_backfill(inst)),
    ("first-fit", lambda inst, seed: greedy_first_fit(inst)),
)
BASELINES = [name for name, _ in PLANNERS[1:]]


@dataclass
class Row:
    name: str
    steps: int
    gpu_steps: int
    nodes: int
    lb: float  # the strong bound: what makespan / LB divides by
    plain_lb: float  # bench rule "Lower bound" with the GPU term
    gpu_lb: float
    makespan: dict[str, float]
    seconds: dict[str, float]


def measure(name: str, inst: Instance, seed: int) -> Row:
    makespan: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for label, run in PLANNERS:
        plan, seconds[label] = timed(lambda run=run: run(inst, seed))  # type: ignore[misc]
        makespan[label] = checked(inst, plan, f"{name}: {label}").makespan
    return Row(
        name,
        len(inst.tasks),
        sum(1 for t in inst.tasks if any(o.gpus for o in t.options)),
        sum(c.count for c in inst.classes),
        lower_bound(inst, strong=True),
        lower_bound(inst),
        gpu_bound(inst),
        makespan,
        seconds,
    )


def _f(v: float | None, width: int, digits: int = 1) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:{width}.{digits}f}"


def gmean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def print_rows(rows: list[Row], title: str) -> None:
    cells = "".join(f" {label:>16}" for label, _ in PLANNERS)
    times = " ".join(f"{label[:5]:>5}" for label, _ in PLANNERS)
    head = (
        f"{title:<22} {'steps':>5} {'gpu':>4} {'nodes':>5} {'LB (LP)':>8} {'LB old':>8} {'LB gpu':>7} |{cells} "
        f"| plan s: {times}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        ms = "".join(f" {r.makespan[label]:9.1f} {r.makespan[label] / r.lb:6.2f}" for label, _ in PLANNERS)
        ts = " ".join(f"{r.seconds[label]:5.2f}" for label, _ in PLANNERS)
        print(
            f"{r.name:<22} {r.steps:>5} {r.gpu_steps:>4} {r.nodes:>5} {r.lb:8.1f} {r.plain_lb:8.1f} {r.gpu_lb:7.1f} "
            f"|{ms} | plan s: {ts}"
        )


def print_gains(rows: list[Row], what: str) -> None:
    """Geometric-mean makespan reduction of hetflow over each other column, and the range."""
    print(f"\nhetflow's geometric-mean makespan reduction over each ({what}; n = {len(rows)}):")
    for label in BASELINES:
        ratios = [r.makespan["hetflow"] / r.makespan[label] for r in rows]
        print(
            f"  vs {label:<9} {1 - gmean(ratios):6.1%}   (per instance: "
            + ", ".join(f"{1 - x:.1%}" for x in ratios)
            + ")"
        )
    for label in ("hetflow", "HEFT"):
        gaps = [r.makespan[label] / r.lb for r in rows]
        print(
            f"  {label} makespan / LB (LP): geometric mean {gmean(gaps):.3f}, at most {max(gaps):.3f}   (per instance: "
            + ", ".join(f"{x:.3f}" for x in gaps)
            + ")"
        )


@dataclass
class SagaRow:
    name: str
    saga: dict[str, float | None]
    compatible: float  # tie_break="saga"
    own: float  # tie_break="hetflow", the default
    own_s: float

    def best(self) -> float | None:
        done = [v for v in self.saga.values() if v is not None]
        return min(done) if done else None


def measure_saga(name: str, inst: Instance, seed: int, with_saga: bool) -> SagaRow:
    compatible = checked(inst, plan_heuristic(inst, seed=seed, tie_break="saga"), f"{name}: hetflow saga tie-break")
    own, own_s = timed(lambda: plan_heuristic(inst, seed=seed))
    checked(inst, own, f"{name}: hetflow in SAGA mode")
    saga: dict[str, float | None] = dict.fromkeys(SAGA_NAMES)
    if with_saga:
        for algo in SAGA_NAMES:
            saga[algo] = checked(inst, saga_plan(inst, algo), f"{name}: SAGA {algo}").makespan
    return SagaRow(name, saga, compatible.makespan, own.makespan, own_s)


def print_saga(rows: list[SagaRow]) -> None:
    print(
        "\nSAGA mode: CPU variants only, one task per node, node speed = its type's, 1.25 GB/s (topcuoglu: its\n"
        "own 3 unrelated processors).  'het saga-tb': hetflow with tie_break=\"saga\", SAGA's task order for equal\n"
        "ranks and SAGA's rank pass (a copy of SAGA's choices); 'het own-tb': hetflow's default tie-breaking."
    )
    head = (
        f"{'instance':<12} | {'SAGA HEFT':>9} {'CPOP':>8} {'MinMin':>8} | {'het saga-tb':>11} {'<=best':>6} | "
        f"{'het own-tb':>10} {'<=best':>6} {'plan s':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        best = r.best()

        def ok(v: float, best: float | None = best) -> str:
            return "-" if best is None else ("yes" if v <= best * (1 + 1e-9) else "NO")

        print(
            f"{r.name:<12} | {_f(r.saga['HEFT'], 9)} {_f(r.saga['CPOP'], 8)} {_f(r.saga['MinMin'], 8)} | "
            f"{_f(r.compatible, 11)} {ok(r.compatible):>6} | {_f(r.own, 10)} {ok(r.own):>6} {_f(r.own_s, 6, 2)}"
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


SCALE_CASES = (  # (recipe, steps asked of the generator, hetero-16 multiplied by)
    ("MontageRecipe", 1000, 4),
    ("EpigenomicsRecipe", 1000, 4),
    ("GenomeRecipe", 2000, 4),
    ("MontageRecipe", 2000, 4),
    ("CyclesRecipe", 5000, 16),
    ("EpigenomicsRecipe", 10000, 16),
)


def scale_rows(classes: tuple[MachineClass, ...], bandwidth: float, seed: int) -> list[Row]:
    rows = []
    for recipe, n, factor in SCALE_CASES:
        trace = generated_trace(recipe, n, seed)
        inst = build_instance(workflow_from_wfcommons(trace), scaled(classes, factor), bandwidth=bandwidth)
        rows.append(measure(f"{recipe.removesuffix('Recipe').lower()} {n}", inst, seed))
    return rows


# --- main -------------------------------------------------------------------------------


def emit_time_ratio(rows: list[Row], what: str) -> None:
    """issue 43's row: hetflow's planning time over plain HEFT's on the same instance, the worst case."""
    if not rows:
        return
    worst = max(rows, key=lambda r: r.seconds["hetflow"] / max(r.seconds["HEFT"], 1e-6))
    ratio = worst.seconds["hetflow"] / max(worst.seconds["HEFT"], 1e-6)
    target = f"planner time within 5x plain HEFT's, worst of {what} ({worst.name}: {worst.seconds['hetflow']:.2f} s)"
    emit(SpeedRow(target, ratio, "x", "plain HEFT (s)", worst.seconds["HEFT"], 5.0, "bench.planning.planner"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-saga", action="store_true", help="skip SAGA's schedulers (anrg-saga not needed)")
    ap.add_argument("--no-scale", action="store_true", help="skip the generated 1,000- to 10,000-step workflows")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t_start = time.perf_counter()
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
    print(
        "\nBaseline table: hetero-16 with GPU variants (shared machines: cores, memory, GPUs); topcuoglu: its own\n"
        "3 unrelated processors, one task at a time.  Each column: makespan in seconds, then makespan / LB.\n"
        "LB (LP) = lower_bound(strong=True), what every ratio divides by: an LP of chains and per-class\n"
        "capacities (GLOP; up to 15,000 task options), option pruning by a guessed makespan, area with heads\n"
        "and tails, GPU steps in whole rounds.  LB old = max(critical path, core work / core capacity, GPU work /\n"
        "GPU capacity), bench rule 'Lower bound'; 'LB gpu' is its GPU term.\n"
        "hetflow: plan_heuristic (default tie-break); HEFT: plain HEFT; kube: kube-scheduler default scores,\n"
        f"ties at random (seed {args.seed}); slurm: age priority + EASY backfill, limits = run times; first-fit:\n"
        "cluster order.  The three baselines release a step when its parents finish and take the GPU variant\n"
        "when a GPU fits then (hetflow's local-runner rule); HEFT and hetflow plan the whole DAG ahead."
    )
    topc = topcuoglu_instance()
    rows = [measure("topcuoglu", topc, args.seed)]
    saga_rows = [measure_saga("topcuoglu", topc, args.seed, with_saga)]
    for name in TRACES:
        trace = json.loads((DATA / "wfinstances" / f"{name}.json").read_text())
        het, saga_mode = trace_instances(trace, classes, bandwidth)
        short = name.split("-")[0]
        rows.append(measure(short, het, args.seed))
        saga_rows.append(measure_saga(short, saga_mode, args.seed, with_saga))
    print_rows(rows, "instance")
    print_gains(rows[1:], "the five traces on hetero-16")
    emit_time_ratio(rows, "the six traces")
    print_saga(saga_rows)
    if with_saga:
        heft80 = saga_rows[0].saga["HEFT"]
        verdict = "ok" if heft80 is not None and abs(heft80 - TOPCUOGLU_HEFT) < 1e-9 else "MAPPING WRONG"
        print(f"SAGA's HEFT on the Topcuoglu graph: {heft80:g} (published {TOPCUOGLU_HEFT:g}): {verdict}")
        for label, attr in (("saga tie-break", "compatible"), ("own tie-break", "own")):
            worse = [r.name for r in saga_rows if (b := r.best()) is not None and getattr(r, attr) > b * (1 + 1e-9)]
            ties = sum(1 for r in saga_rows if (b := r.best()) is not None and abs(getattr(r, attr) - b) <= 1e-9 * b)
            print(
                f"hetflow ({label}) no worse than the best of SAGA's HEFT, CPOP and MinMin: "
                + ("on every instance" if not worse else f"NOT on {', '.join(worse)}")
                + f"; equal to it on {ties} of {len(saga_rows)}"
            )
    if not args.no_scale:
        try:
            import wfcommons  # noqa: F401
        except ImportError:
            print("\nscale: the wfcommons package is not installed; pip install -e '.[bench]'")
        else:
            print(
                "\nScale table: wfcommons generator, seeded, GPU variants per bench rule 3, hetero-16 with every\n"
                "count multiplied (x4: 64 nodes, x16: 256 nodes).  Columns as in the baseline table."
            )
            srows = scale_rows(classes, bandwidth, args.seed)
            print_rows(srows, "workflow")
            print_gains(srows, "generated workflows")
            emit_time_ratio(srows, "the generated workflows")
    print(f"\nbench.planner ran for {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
