"""A fully cached rerun of an N-step workflow, end to end (issue 26: 10,000 steps in under 5 s).

    python -m bench.local.cachedrerun [--steps 10000] [--distinct 100] [--repeat 3] [--planner greedy]

The workload: one matrix fan-out of N items (busybox; each writes one small output) and one
step after all of them (N + 1 steps).  An item's command reads only the matrix axis ``a`` of
``distinct`` values, the other axis numbering the repeats, so the N items have ``distinct``
cache keys.

The cache comes from a real run.  One ``hetflow run`` of the same file, in a private
HETFLOW_HOME, seeds it: the first items of each key run in containers, and the items after
them with the same key are taken from the cache that run is filling (the runner's own
in-run hits).  About ``distinct`` containers (a few more where items of one key start
together), so seeding 10,000 steps takes a minute, not the hour 10,000 containers take here.
Where this flatters: the rerun looks up and restores N entries, but they are ``distinct``
entries whose objects the page cache holds; with N different results each restore reads
its own object (still from the page cache, the seeding run having just written them).
``bench.local.cachedrerun --steps 2000 --distinct 2000`` measures that case in ~10 minutes.

Timed: ``hetflow run FILE`` as a process, start to exit (interpreter, parse, submit,
the runner taking every step from the cache, the summary printed), ``--repeat`` times;
the median is reported.  The anchor, in the same home and the same run of this bench:
``hetflow run -n FILE``, the dry run, which does the same parse, checks and plan and
computes and looks up every step's key, but restores and records nothing.  So the rerun's
excess over the anchor is what taking the results costs.

``--planner greedy`` (the default here; HETFLOW_PLANNER=greedy) runs without the planner:
planning 10,000 steps on one machine is ``bench.planning.planner``'s figure, and the planner before
issue 26 took minutes and gigabytes of memory at that size.  ``--planner plan`` measures
with it (what a user gets by default), in both the rerun and the anchor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from demo.images import build_tiny_image

from bench.speedrow import Row, emit

IMAGE = "localhost/hetflow-test/busybox:latest"
SUMMARY = re.compile(r"^run ([0-9a-f]+) (\w+) in ", re.MULTILINE)


def workflow(n: int, distinct: int) -> str:
    """N items (``distinct`` values of ``a`` times ``n // distinct`` repeats) and a gather."""
    if distinct < 1 or n % distinct:
        raise SystemExit(f"--steps {n} must be a multiple of --distinct {distinct}")
    values = ", ".join(f"v{i}" for i in range(distinct))
    reps = ", ".join(str(i) for i in range(n // distinct))
    # the repeats axis first: consecutive items have different keys, so the seeding run's
    # first wave of containers are different results
    return f"""apiVersion: hetflow/v1
name: cachedrerun
steps:
  work:
    image: {IMAGE}
    matrix: {{rep: [{reps}], a: [{values}]}}
    command: [sh, -c, "echo {{{{ item.a }}}} > /out/o.txt"]
    resources: {{cpus: 0.25, memory: 32Mi}}
    estimate: 1s
    outputs: [o.txt]
  done:
    image: {IMAGE}
    needs: [work]
    command: ["true"]
    resources: {{cpus: 0.25, memory: 32Mi}}
    estimate: 1s
"""


def _hetflow(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hetflow.cli.main", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"hetflow {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return took, proc.stdout


def _run_id(stdout: str) -> str:
    found = SUMMARY.findall(stdout)
    if not found or found[-1][1] != "succeeded":
        raise SystemExit(f"the run did not succeed: {stdout[-500:]}")
    return str(found[-1][0])


def _steps(run_id: str, env: dict[str, str]) -> list[dict[str, Any]]:
    return list(json.loads(_hetflow(["show", run_id, "--json"], env)[1])["steps"])


def cached_rerun(n: int = 10_000, distinct: int = 100, repeat: int = 3, planner: str = "greedy") -> dict[str, Any]:
    """Seed the cache with one real run of the workload (see the module's docstring), then
    time ``repeat`` fully cached reruns and as many dry runs (the anchor), alternating.
    Returns the figures (seconds; medians) with what each was measured on."""
    build_tiny_image(IMAGE)
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-cachedrerun-") as tmp:
        env = {**os.environ, "HETFLOW_HOME": str(Path(tmp) / "home"), "HETFLOW_PLANNER": planner}
        env.pop("HETFLOW_NO_PARSE_CACHE", None)
        wf = Path(tmp) / "cachedrerun.yaml"
        wf.write_text(workflow(n, distinct))
        seed_s, out = _hetflow(["run", str(wf)], env)
        seeded = _steps(_run_id(out), env)
        containers = sum(1 for s in seeded if s["attempts"] > 0)
        reruns: list[float] = []
        dry: list[float] = []
        for _ in range(repeat):
            took, out = _hetflow(["run", "-n", str(wf)], env)
            dry.append(took)
            took, out = _hetflow(["run", str(wf)], env)
            reruns.append(took)
            steps = _steps(_run_id(out), env)
            cached = [s for s in steps if s["attempts"] == 0 and str(s["reason"]).startswith("cached: from run")]
            if len(cached) != len(steps) or len(steps) != n + 1:
                raise SystemExit(f"not a fully cached rerun: {len(cached)} of {len(steps)} steps cached")
    rerun, anchor = statistics.median(reruns), statistics.median(dry)
    return {
        "steps": n + 1,
        "distinct_keys": distinct + 1,
        "planner": planner,
        "seed_s": seed_s,
        "seed_containers": containers,
        "rerun_s": rerun,
        "rerun_all_s": reruns,
        "dry_run_s": anchor,
        "dry_run_all_s": dry,
        "ratio_to_dry_run": rerun / anchor,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000, help="fan-out items (the run has one step more)")
    ap.add_argument("--distinct", type=int, default=100, help="distinct results (cache keys) among the items")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--planner", choices=("greedy", "plan"), default="greedy")
    args = ap.parse_args()
    r = cached_rerun(args.steps, args.distinct, args.repeat, args.planner)
    print(
        f"seeded by one real run: {r['seed_s']:.0f} s, {r['seed_containers']} containers, "
        f"{r['steps'] - r['seed_containers']} steps taken from the cache in that run"
    )
    print()
    print(f"| {r['steps']} steps, {r['distinct_keys']} distinct keys, HETFLOW_PLANNER={r['planner']} | median s |")
    print("|---|---|")
    print(f"| `hetflow run FILE`, fully cached (end to end) | {r['rerun_s']:.2f} |")
    print(f"| anchor: `hetflow run -n FILE` (dry run: parse, plan, every key looked up) | {r['dry_run_s']:.2f} |")
    print(f"| ratio | {r['ratio_to_dry_run']:.2f}x |")
    print()
    print("each run: " + ", ".join(f"{x:.2f}" for x in r["rerun_all_s"]))
    print("each dry run: " + ", ".join(f"{x:.2f}" for x in r["dry_run_all_s"]))
    target = f"fully cached rerun of {r['steps']} steps under 3 s (HETFLOW_PLANNER={r['planner']})"
    emit(Row(target, r["rerun_s"], "s", "hetflow run -n", r["dry_run_s"], 3.0, "bench.local.cachedrerun"))


if __name__ == "__main__":
    main()
