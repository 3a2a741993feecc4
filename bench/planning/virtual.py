"""Virtual clusters on the five WfInstances traces (GPU variants by bench rule 3), against
honest anchors (issue 14).

For each trace, at one deadline: the cheapest single-type cluster meeting it and the
cheapest two-type mix meeting it (both searched with the planner the virtual search uses,
plan/sizing/anchors.py), and the cheapest cluster found by all the searches (the one hetflow
recommends).  The deadline is the one `hetflow cluster plan` uses when none is given: the
makespan of the knee of the frontier.  The talk's common denominator (every node the type
that runs every step: gpu.h100 here) is printed too, as the strawman it is: a saving
against it mostly measures the price of an H100.

    python -m bench.planning.virtual [--catalog examples/clusters/catalog.yaml]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.data import TRACES
from hetflow.plan.sizing.cluster import load_catalog
from hetflow.plan.sizing.clusterpoint import ClusterPoint
from hetflow.plan.sizing.virtual import plan_virtual_cluster
from hetflow.spec.load.wfcommons import workflow_from_wfcommons

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("1000genome", "montage", "blast", "bwa", "epigenomics")


def _cluster(p: ClusterPoint | None) -> str:
    return " + ".join(f"{n} {t}" for t, n in p.counts) if p is not None else "none found"


def _money(p: ClusterPoint | None) -> str:
    return f"{p.cost:.2f}" if p is not None else "-"


def _pct(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", type=Path, default=ROOT / "examples" / "clusters" / "catalog.yaml")
    args = ap.parse_args()
    catalog = load_catalog(args.catalog)
    classes = catalog.classes()
    print(f"catalog {args.catalog.name}: " + ", ".join(f"{c.name} ${c.price_per_hour}/h" for c in classes))
    print("costs in dollars, every node rented for the whole makespan; deadline: the knee's makespan, seconds")
    head = (
        f"{'trace':12} {'deadline':>8} {'strawman $':>10}  {'best single type':16} {'$':>6}  "
        f"{'best two-type mix':22} {'$':>6}  {'recommended (cheapest found)':28} {'$':>6} {'vs 1':>5} {'vs 2':>5}"
        f" {'alone $':>7} {'time':>6}"
    )
    print(head)
    print("-" * len(head))
    vs_single: list[float] = []
    vs_pair: list[float] = []
    started = time.perf_counter()
    notes: list[str] = []
    for name in NAMES:
        path = next(TRACES.glob(f"{name}-*.json"))
        workflow = workflow_from_wfcommons(json.loads(path.read_text()), file=str(path))
        t0 = time.perf_counter()
        r = plan_virtual_cluster(workflow, classes, bandwidth=catalog.bandwidth_bytes)
        took = time.perf_counter() - t0
        c = r.comparison
        if c is None or c.virtual is None:
            print(f"{name:12} no comparison: {r.rule}")
            continue
        straw = r.strawman.common if r.strawman is not None else None
        s1, s2 = c.saving_vs_single, c.saving_vs_pair
        if s1 is not None:
            vs_single.append(s1)
        if s2 is not None:
            vs_pair.append(s2)
        print(
            f"{name:12} {c.deadline:8.1f} {_money(straw):>10}  {_cluster(c.single):16} {_money(c.single):>6}  "
            f"{_cluster(c.pair):22} {_money(c.pair):>6}  {_cluster(c.virtual):28} {_money(c.virtual):>6} "
            f"{_pct(s1):>5} {_pct(s2):>5} {_money(c.own):>7} {took:5.1f}s"
        )
        if c.found_by != "the virtual search":
            notes.append(f"{name}: the cheapest cluster was found by {c.found_by}, not by the virtual search")
        if c.anchors.capped:
            notes.append(f"{name}: the anchor search ran out of plannings; its anchors may be dear (savings high)")
    print("-" * len(head))
    print(f"strawman: every node {r.common_type} (the common denominator), sized to meet the deadline")
    print("recommended: the cheapest cluster any search found meeting the deadline; vs 1, vs 2: its saving against")
    print("the best single type and the best two-type mix; alone: the cheapest the mix search found by itself")
    for label, values in (("the best single type", vs_single), ("the best two-type mix", vs_pair)):
        if values:
            print(
                f"saving against {label}: min {min(values):.0%}, median {statistics.median(values):.0%} "
                f"over {len(values)} traces"
            )
    for n in notes:
        print(f"note: {n}")
    print(f"run time {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
