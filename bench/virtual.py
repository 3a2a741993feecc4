"""Virtual clusters on the five WfInstances traces (GPU variants by bench rule 3), against
the "common denominator" cluster of the virtual-supercomputer talk: every node of the one
catalog type that can run every step.

For each trace: the common-denominator cluster is sized to meet a deadline, and the
cheapest virtual cluster found that meets the same deadline is compared with it (the
talk's target: at least 30% cheaper).  Two choices of the common type are shown: the rule
(the type with the most memory among those that run every step, a GPU type when some step
is GPU-only) and a CPU-only high-memory type, the harder baseline.

    python -m bench.virtual [--catalog examples/clusters/catalog.yaml]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hetflow.plan.cluster import load_catalog
from hetflow.plan.virtual import plan_virtual_cluster
from hetflow.spec.wfcommons import workflow_from_wfcommons

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "bench" / "wfinstances"
NAMES = ("1000genome", "montage", "blast", "bwa", "epigenomics")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--catalog", type=Path, default=ROOT / "examples" / "clusters" / "catalog.yaml")
    ap.add_argument("--hard-baseline", default="cpu.highmem", help="a CPU-only type to compare with as well")
    args = ap.parse_args()
    catalog = load_catalog(args.catalog)
    classes = catalog.classes()
    print(f"catalog {args.catalog.name}: " + ", ".join(f"{c.name} ${c.price_per_hour}/h" for c in classes))
    head = f"{'trace':12} {'common':12} {'deadline':>9} {'common $':>9} {'virtual $':>9} {'saving':>7}  virtual cluster"
    print(head)
    print("-" * len(head))
    savings: dict[str, list[float]] = {}
    for name in NAMES:
        path = next(TRACES.glob(f"{name}-*.json"))
        workflow = workflow_from_wfcommons(json.loads(path.read_text()), file=str(path))
        for common in (None, args.hard_baseline):
            t0 = time.perf_counter()
            r = plan_virtual_cluster(workflow, classes, bandwidth=catalog.bandwidth_bytes, common_type=common)
            took = time.perf_counter() - t0
            cmp = r.comparison
            if cmp is None:
                print(f"{name:12} {r.common_type or '-':12} no comparison: {r.chosen.rule if r.chosen else ''}")
                continue
            savings.setdefault(r.common_type or "?", []).append(cmp.saving)
            counts = " ".join(f"{t}x{n}" for t, n in cmp.virtual.counts)
            print(
                f"{name:12} {r.common_type or '-':12} {cmp.deadline:9.1f} {cmp.common.cost:9.2f} "
                f"{cmp.virtual.cost:9.2f} {cmp.saving:7.0%}  {counts}  ({took:.1f}s)"
            )
    for common, values in savings.items():
        print(f"common type {common}: saving min {min(values):.0%} over {len(values)} traces (target >= 30%)")


if __name__ == "__main__":
    main()
