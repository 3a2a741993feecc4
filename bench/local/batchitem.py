"""What one item costs inside a batch: ``python -m bench.local.batchitem [--items 200]``.

A fan-out of N trivial items (busybox ``echo ITEM > /out/o.txt``, 1 CPU each, ``batch:
N``) through ``hetflow run``; per batch, the span from its first item's start to its last
item's exit code (the marks the batch's entry leaves in its folder) over its items: the
entry's own cost per item (the item's ``sh``, its log, copying its /out, its exit code),
without the container's start.  The anchor, in the same run: the same items through
``hetflow run --no-cache`` with ``batch: false`` (a container each), per item.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from demo.images import TINY_IMAGE, build_tiny_image


def workflow(items: int, batch: str, image: str) -> str:
    return f"""apiVersion: hetflow/v1
name: batchitem
steps:
  work:
    image: {image}
    foreach: {{range: {items}}}
    command: [sh, -c, "echo {{{{ item }}}} > /out/o.txt"]
    resources: {{cpus: 1, memory: 32Mi}}
    estimate: 0.1s
    outputs: [o.txt]
    batch: {batch}
"""


def _run(items: int, batch: str, image: str) -> tuple[float, Path]:
    d = Path(tempfile.mkdtemp(prefix="hf-batchitem-"))
    (d / "wf.yaml").write_text(workflow(items, batch, image))
    env = {**os.environ, "HETFLOW_HOME": str(d / "home")}
    cli = [sys.executable, "-m", "hetflow.cli.main"]
    t0 = time.monotonic()
    subprocess.run([*cli, "run", "-q", "--no-cache", str(d / "wf.yaml")], env=env, check=True, capture_output=True)
    wall = time.monotonic() - t0
    runs = json.loads(subprocess.run([*cli, "ps", "--all", "--json"], env=env, check=True, capture_output=True).stdout)
    return wall, d / "home" / "runs" / runs[0]["id"]


def per_item(items: int = 200) -> dict[str, float]:
    """Seconds per item inside a batch (median over the run's batches), and per item as a
    container of its own (the anchor), with the two runs' wall times."""
    image = build_tiny_image(TINY_IMAGE)
    wall, workdir = _run(items, str(items), image)
    spans = []
    for folder in (workdir / "batches").iterdir():
        starts = [p.stat().st_mtime for p in (folder / "start").iterdir()]
        ends = [p.stat().st_mtime for p in (folder / "rc").iterdir()]
        if len(ends) > 1:
            spans.append((max(ends) - min(starts)) / len(ends))
    alone_wall, _ = _run(items, "false", image)
    return {
        "items": items,
        "batches": len(spans),
        "per_item_in_batch_s": statistics.median(spans),
        "batched_wall_s": wall,
        "alone_wall_s": alone_wall,
        "alone_per_item_s": alone_wall / items,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.local.batchitem", description=__doc__)
    ap.add_argument("--items", type=int, default=200)
    args = ap.parse_args(argv)
    got = per_item(args.items)
    print(f"{args.items} trivial items, 1 CPU each, on this machine")
    print(f"inside a batch: {got['per_item_in_batch_s'] * 1000:.1f} ms an item (median of {got['batches']} batches)")
    print(f"whole run batched: {got['batched_wall_s']:.1f} s; a container each (anchor): {got['alone_wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
