"""GPU sharing: sharing-aware planning against whole-GPU-only planning, in one run.

The workload: a DAG of ``prep`` (CPU) -> many small GPU steps (``gpu_share: 0.25``, 30-90 s
alone on an A100, seeded) and a few whole-GPU steps (200-400 s) -> ``report`` (CPU).  The
cluster: a few nodes of 4 A100-80GB.  Each case plans the workload with hetflow's planner
(``plan_heuristic``) twice on the same nodes: once with the case's sharing policy (the
planner chooses, per step, a share or a whole GPU) and once with sharing forbidden (the
nodes exclusive, every step on whole GPUs: the anchor, measured in the same run).  Every
plan is checked with ``check_plan`` and replayed with ``simulate(noise=0)``.

Cases: time-slicing x4 and MPS x4 with shares of 0.25 (four fit in one GPU: sharing is
free); time-slicing x4 with shares of 0.5 (four tenants load a GPU to 2 and each slows by
1.966x: sharing is not free, the planner must weigh it); a MIG layout (3g.40gb, 2g.20gb,
1g.10gb, 1g.10gb) with the small steps asking for a 1g.10gb instance.  Columns: makespan
and GPU-hours held (sum over steps of the GPU fraction held x its run time: a share counts
its share, a MIG instance its slices of 7, a whole GPU 1), each with its ratio to the anchor.

    python -m bench.planning.sharing [--steps 200] [--whole 20] [--nodes 3] [--seed 0]

Timings are wall-clock on this machine, single-threaded.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass

from hetflow.inventory import DEFAULT_TIMESLICE_SLOWDOWN
from hetflow.plan.build import build_instance
from hetflow.plan.checking.simulator import simulate
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.cost import gpu_amount
from hetflow.plan.instance import Instance, Plan
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.sizing.cluster import Cluster, parse_cluster
from hetflow.spec import Workflow, parse_workflow

MIG_LAYOUT = "[3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]"


@dataclass(frozen=True)
class Case:
    name: str
    sharing: str  # the gpus: keys of the shared cluster (sharing or mig)
    request: str  # the small steps' GPU request
    share: float  # the fraction of a GPU a small step keeps busy alone
    mig_factor: float = 1.0  # a MIG step's run time on its instance / alone on a whole GPU


CASES = (
    Case("time-slicing x4, share 0.25", "sharing: {mode: time-slicing, replicas: 4}", "gpu_share: 0.25", 0.25),
    Case("mps x4, share 0.25", "sharing: {mode: mps, replicas: 4}", "gpu_share: 0.25", 0.25),
    Case("time-slicing x4, share 0.5", "sharing: {mode: time-slicing, replicas: 4}", "gpu_share: 0.5", 0.5),
    # A step that keeps 0.25 of a GPU busy gets 1/7 of the SMs on a 1g.10gb instance: it
    # runs 0.25 x 7 = 1.75x its whole-GPU time (the estimate is its time on the instance).
    Case(f"MIG {MIG_LAYOUT}, 1g.10gb", f"mig: {MIG_LAYOUT}", "gpu_mig: 1g.10gb", 0.25, mig_factor=1.75),
)


def workflow(case: Case, steps: int, whole: int, seed: int, anchor: bool) -> Workflow:
    """The DAG; ``anchor``: the small steps ask for a whole GPU (MIG case) or keep their share
    request, which an exclusive node answers with a whole GPU."""
    rng = random.Random(seed)
    small = "gpus: 1" if anchor and case.request.startswith("gpu_mig") else case.request
    lines = ["apiVersion: hetflow/v1", "name: sharing", "steps:"]
    lines += ["  prep: {image: img, estimate: 10, resources: {cpus: 1, memory: 1Gi}}"]
    names = []
    for i in range(steps):
        alone = rng.uniform(30, 90)
        est = alone * (1.0 if anchor else case.mig_factor)
        lines.append(f"  s{i}: {{image: img, estimate: {est:.3f}, needs: [prep], resources: {{cpus: 1, {small}}}}}")
        names.append(f"s{i}")
    for i in range(whole):
        est = rng.uniform(200, 400)
        lines.append(f"  w{i}: {{image: img, estimate: {est:.3f}, needs: [prep], resources: {{cpus: 4, gpus: 1}}}}")
        names.append(f"w{i}")
    lines.append(f"  report: {{image: img, estimate: 10, needs: [{', '.join(names)}], resources: {{cpus: 1}}}}")
    return parse_workflow("\n".join(lines) + "\n", "sharing.yaml").workflow


def cluster(nodes: int, gpus_extra: str, plain: int = 0) -> Cluster:
    """``nodes`` 4-GPU nodes whose GPUs have ``gpus_extra`` (a sharing policy or MIG layout),
    the last ``plain`` of them exclusive instead."""
    extra = f", {gpus_extra}" if gpus_extra else ""
    node = "cores: 96, memory: 1024Gi, price: 32.77"
    gpu = 'model: NVIDIA A100-SXM4-80GB, count: 4, memory: 80Gi, computeCapability: "8.0"'
    types = [f"  - {{name: gpu.a100x4, count: {nodes - plain}, {node}, gpus: {{{gpu}{extra}}}}}"]
    if plain:
        types.append(f"  - {{name: gpu.a100x4.whole, count: {plain}, {node}, gpus: {{{gpu}}}}}")
    text = "apiVersion: hetflow/v1\nkind: Cluster\nname: sharing\nnodeTypes:\n" + "\n".join(types) + "\n"
    return parse_cluster(text, "sharing-cluster.yaml")


def gpu_hours(instance: Instance, plan: Plan) -> float:
    """GPU-time held: each placement's GPU fraction (share, MIG slices / 7, whole GPUs) x its run time."""
    total = 0.0
    for p in plan.placements.values():
        total += gpu_amount(instance.machine_class(p.machine_class), p) * (p.finish - p.start)
    return total / 3600.0


@dataclass(frozen=True)
class Result:
    makespan: float
    gpu_hours: float
    shared: int  # small steps placed on a share or MIG instance
    seconds: float


def run(wf: Workflow, cl: Cluster) -> Result:
    t0 = time.perf_counter()
    inst = build_instance(wf, cl.classes(), bandwidth=cl.bandwidth_bytes)
    plan = plan_heuristic(inst)
    seconds = time.perf_counter() - t0
    problems = check_plan(inst, plan)
    if problems:
        raise SystemExit(f"bench: an invalid plan: {problems[:3]}")
    replay = simulate(inst, plan, noise=0.0)
    if replay.makespan > plan.makespan * (1 + 1e-9):
        raise SystemExit(f"bench: the plan's replay takes {replay.makespan:g} s, over its {plan.makespan:g} s")
    shared = sum(1 for p in plan.placements.values() if p.share > 0 or p.mig_device is not None)
    return Result(plan.makespan, gpu_hours(inst, plan), shared, seconds)


def measure(case: Case, steps: int, whole: int, nodes: int, seed: int) -> tuple[Result, Result]:
    # MIG nodes give out instances only: the whole-GPU steps need one exclusive node, kept
    # in the shared cluster (the anchor's nodes are all exclusive).
    plain = 1 if case.request.startswith("gpu_mig") and nodes > 1 else 0
    shared = run(workflow(case, steps, whole, seed, anchor=False), cluster(nodes, case.sharing, plain))
    anchor = run(workflow(case, steps, whole, seed, anchor=True), cluster(nodes, ""))
    return shared, anchor


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="small GPU steps (default 200)")
    ap.add_argument("--whole", type=int, default=20, help="whole-GPU steps (default 20)")
    ap.add_argument("--nodes", type=int, default=3, help="4-GPU nodes (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; seed {args.seed}")
    print(
        f"\nGPU sharing: {args.steps} small GPU steps + {args.whole} whole-GPU steps between a CPU prep and report,\n"
        f"on {args.nodes} nodes of 4 A100-80GB.  Slowdown model: a GPU's load = the sum of the shares of the\n"
        "tenants on it; time-slicing: a tenant runs solo x (1 + s x max(0, load - 1)), s = "
        f"{DEFAULT_TIMESLICE_SLOWDOWN:.3f} by default\n"
        "(the seed talk: 2 containers sharing one GPU ran 28.7 s each vs 14.6 s alone, 28.7 / 14.6 - 1), at most\n"
        "replicas tenants, and no tenant is ever slowed beyond the load it was planned at; MPS: shares on a GPU\n"
        "sum to <= 1, no slowdown; MIG: an instance is a device of its own (estimate: run time on it).\n"
        "anchor = the same planner with sharing forbidden (exclusive nodes, whole GPUs), same run.\n"
    )
    head = (
        f"{'case':<42} {'makespan s':>10} {'anchor s':>9} {'ratio':>6} | {'GPU-h':>7} {'anchor':>7} {'ratio':>6} "
        f"| {'shared':>6} | plan s"
    )
    print(head)
    print("-" * len(head))
    for case in CASES:
        shared, anchor = measure(case, args.steps, args.whole, args.nodes, args.seed)
        print(
            f"{case.name:<42} {shared.makespan:10.1f} {anchor.makespan:9.1f} {shared.makespan / anchor.makespan:6.2f} "
            f"| {shared.gpu_hours:7.2f} {anchor.gpu_hours:7.2f} {shared.gpu_hours / anchor.gpu_hours:6.2f} "
            f"| {shared.shared:>6} | {shared.seconds:5.2f} {anchor.seconds:5.2f}"
        )
    print(
        "\nratio < 1: sharing-aware planning is better.  shared: small steps the planner put on a share or a MIG\n"
        "instance (the rest took a whole GPU when that finished sooner)."
    )


if __name__ == "__main__":
    main()
