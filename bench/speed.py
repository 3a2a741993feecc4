"""Issue 43's targets in one table, each row with its anchor measured in the same run.

    python -m bench.speed [--only cli,launch,...] [--hog N] [--markdown FILE]

Runs, one after another, the benches that measure issue 43's targets (each prints its own
full table as it goes) and then one summary table of their ``speed row`` lines
(``bench.speedrow``): the target, hetflow's figure, the anchor that bench measured in the
same run, the target's bound and whether it is met.

Parts (``--only`` takes their names):

    cli         bench.cli: validate, plan, run --dry-run, ps, show, logs, trace, cache ls,
                nodes (under 0.3 s), TAB completion (under 0.15 s), a fully cached
                20-step run (under 0.5 s); anchors podman ps and git status
    launch      bench.local.overhead: unbatched per-step launch, serial and 2-wide, against
                the same-flags podman run loop (at most 1.05x)
    planner     bench.planning.planner: the planner's time against plain HEFT's (at most 5x)
                with makespans, on the six traces and the generated workflows
    planscale   bench.planning.planscale: cold hetflow plan of 10,000 steps (under 2 s)
    cachedrerun bench.local.cachedrerun: a fully cached 10,001-step rerun (under 3 s)
    batches     bench.local.throughput's fan-out: 2,000 items with batch: 50 against
                Snakemake's hand-packed rule (no slower)
    kubernetes  bench.engines.kube_hetflow: 100 steps through hetflow run --backend
                kubernetes against the same Jobs created by 16 threads (at most 1.1x)

``--hog N`` runs N busy processes (one pure-Python loop each, normal priority) beside every
bench, for the "again with a CPU hog beside it" measurement; the table's header says so.
``make test``'s time is not measured here (it takes minutes): the closing note gives it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.speedrow import Row, load

ROOT = Path(__file__).resolve().parents[1]

PARTS: dict[str, list[str]] = {
    "cli": ["bench.cli", "--repeat", "5"],
    "launch": ["bench.local.overhead", "--steps", "50", "--repeat", "3", "--skip-meanpool"],
    "planner": ["bench.planning.planner", "--no-saga"],
    "planscale": ["bench.planning.planscale", "--rounds", "3"],
    "cachedrerun": ["bench.local.cachedrerun", "--steps", "10000"],
    "batches": ["bench.local.throughput", "--items", "2000", "--only-batched"],
    "kubernetes": ["bench.engines.kube_hetflow", "--steps", "100"],
}


@contextmanager
def hogs(count: int) -> Iterator[None]:
    """``count`` processes spinning a CPU each for as long as the block runs."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL) for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def run_part(name: str, rows_file: str) -> tuple[int, float]:
    """Run one part's bench as a process (its output shown as it goes): exit code, seconds."""
    argv = [sys.executable, "-m", *PARTS[name]]
    print(f"\n=== {name}: {' '.join(argv[2:])}", flush=True)
    env = os.environ | {"HETFLOW_SPEED_ROWS": rows_file}
    start = time.perf_counter()
    code = subprocess.call(argv, cwd=ROOT, env=env)
    return code, time.perf_counter() - start


def table(rows: list[Row], markdown: bool) -> list[str]:
    """The summary, as plain columns or as a markdown table."""
    if markdown:
        out = ["| target | hetflow | anchor (same run) | limit | met |", "|---|---|---|---|---|"]
        for row in rows:
            unit = "" if "(s)" in row.anchor_name else " s"
            anchor = "" if row.anchor is None else f"{row.anchor_name}: {row.anchor:.3f}{unit}"
            out.append(
                f"| {row.target} | {row.figure:.3f} {row.unit} | {anchor} | "
                f"{row.limit:g} {row.unit} | {'yes' if row.met else 'no'} |"
            )
        return out
    out = [f"{'target':52} {'hetflow':>10} {'anchor (same run)':>30} {'limit':>7}  met"]
    for row in rows:
        anchor = "" if row.anchor is None else f"{row.anchor_name} {row.anchor:.3f}"
        out.append(
            f"{row.target:52} {row.figure:9.3f}{row.unit} {anchor:>30} "
            f"{row.limit:6g}{row.unit}  {'yes' if row.met else 'NO'}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated parts (default: all)")
    parser.add_argument("--hog", type=int, default=0, help="busy processes beside every bench")
    parser.add_argument("--markdown", default="", help="also write the summary here as markdown")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(PARTS)
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        parser.error(f"--only: unknown part {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hetflow-speed-") as tmp:
        rows_file = str(Path(tmp) / "rows.jsonl")
        load_before = os.getloadavg()
        with hogs(args.hog):
            for name in names:
                code, seconds = run_part(name, rows_file)
                print(f"=== {name}: exit {code} in {seconds:.0f} s", flush=True)
                if code:
                    failed.append(name)
        rows = load(rows_file)
    head = (
        f"bench.speed {datetime.date.today()}, {os.cpu_count()} CPUs, "
        f"{'a CPU hog' if args.hog == 1 else f'{args.hog} CPU hogs' if args.hog else 'no hog'} beside it, "
        f"load before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}"
    )
    print("\n" + head)
    print("\n".join(table(rows, markdown=False)))
    if failed:
        print(f"parts that failed (their rows may be missing): {', '.join(failed)}")
    if args.markdown:
        Path(args.markdown).write_text(head + "\n\n" + "\n".join(table(rows, markdown=True)) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
