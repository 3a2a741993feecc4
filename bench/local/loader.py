"""Loading a 10,000-step workflow: the previous loader against the current one, in one run.

    python -m bench.local.loader [--steps 10000] [--rounds 3]

The workflow is generated (seeded): a DAG where every step reads up to two outputs of the
hundred steps before it, every tenth step has a CPU and a GPU variant, with
``{{ params.x }}`` in commands and output sizes: about 8 lines of YAML per step, written in
the format both loaders read (no templates or fan-out, which the previous one lacks).  Timed, each the median of
``--rounds`` runs in this process:

- the previous loader: hetflow's spec package as of commit 4aabbd9, taken from git when the
  bench runs (bench/gitanchor.py: ``git archive`` of the commit's modules, imported from a
  temporary folder; the anchor: the same file, the same machine, the same run);
- the current loader, cold: no kept parse (HETFLOW_NO_PARSE_CACHE=1), so it parses;
- the current loader, warm: the file was loaded once before, so the parse kept in
  HETFLOW_HOME/cache/specs (keyed on the text, params, includes and hetflow's code) is read;
- ``hetflow validate`` and ``hetflow plan --cluster examples/clusters/hetero-16.yaml`` end
  to end, as processes (interpreter start and imports included), cold and warm.

The warm figures flatter: they hold only when the same file is loaded again unchanged (a
`plan` after a `validate`, a `run` after a `plan`); the cold ones are what a new or edited
file costs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gitanchor import AnchorUnavailable, old_package

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "4aabbd9"  # the commit whose spec package is the anchor: the loader before its fast path
PREVIOUS_MODULES = ("checks", "dag", "loader", "models", "units")


def generate(steps: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = [
        "apiVersion: hetflow/v1",
        "name: big",
        "params: {size: 4, mode: fast}",
        "steps:",
    ]
    for i in range(steps):
        out.append(f"  s{i}:")
        if i % 10 == 0:
            out += [
                "    variants:",
                "      cpu: {image: 'localhost/x:1', command: [run, --size, '{{ params.size }}'],"
                " resources: {cpus: 2, memory: 1Gi}, estimate: 20s}",
                "      gpu: {image: 'localhost/x:1', command: [run, --gpu], resources: {cpus: 1, memory: 1Gi, gpus: 1},"
                " gpu: {min_compute_capability: '7.0'}, estimate: 2s}",
            ]
        else:
            out += [
                "    image: localhost/hetflow-test/busybox:latest",
                "    command: [sh, -c, 'echo {{ params.mode }} > /out/o.txt']",
                "    resources: {cpus: 1, memory: 512Mi}",
                "    estimate: 5s",
            ]
        if i:
            parents = sorted(set(rng.sample(range(max(0, i - 100), i), k=min(i, 2))))
            out.append("    inputs: {" + ", ".join(f"i{p}: s{p}/o.txt" for p in parents) + "}")
        out.append("    outputs: [o.txt]")
        out.append("    sizes: {o.txt: 10Mi}")
    return "\n".join(out) + "\n"


def median_time(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cli_time(args: list[str], env: dict[str, str], rounds: int) -> float:
    def once() -> None:
        subprocess.run([sys.executable, "-m", "hetflow.cli.main", *args], env=env, check=True, capture_output=True)

    return median_time(once, rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    try:
        with old_package(PREVIOUS, "src/hetflow/spec", PREVIOUS_MODULES) as previous:
            measure(args, previous.loader.load_workflow)
    except AnchorUnavailable as exc:
        sys.exit(f"bench.local.loader: {exc}")


def measure(args: argparse.Namespace, previous_load: Callable[[Path], Any]) -> None:
    """The figures for ``--steps`` and ``--rounds``, printed as a table; ``previous_load`` is the
    anchor's ``load_workflow``."""
    from hetflow.state import load_workflow_cached as load_workflow

    with tempfile.TemporaryDirectory(prefix="hetflow-bench-loader-") as tmp:
        path = Path(tmp) / "big.yaml"
        path.write_text(generate(args.steps))
        home = Path(tmp) / "home"
        os.environ["HETFLOW_HOME"] = str(home)
        lines = path.read_text().count("\n")
        print(f"{args.steps} steps, {lines} lines, {path.stat().st_size / 1e6:.1f} MB; median of {args.rounds}")

        prev = median_time(lambda: previous_load(path), args.rounds)
        os.environ["HETFLOW_NO_PARSE_CACHE"] = "1"
        cold = median_time(lambda: load_workflow(path), args.rounds)
        del os.environ["HETFLOW_NO_PARSE_CACHE"]
        load_workflow(path)  # keep the parse
        warm = median_time(lambda: load_workflow(path), args.rounds)
        same = load_workflow(path).workflow.steps["s11"].command == previous_load(path).workflow.steps["s11"].command

        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
        cold_env = {**env, "HETFLOW_NO_PARSE_CACHE": "1"}
        cluster = str(ROOT / "examples/clusters/hetero-16.yaml")
        validate_cold = cli_time(["validate", str(path)], cold_env, args.rounds)
        validate_warm = cli_time(["validate", str(path)], env, args.rounds)
        plan_cold = cli_time(["plan", str(path), "--cluster", cluster], cold_env, args.rounds)
        plan_warm = cli_time(["plan", str(path), "--cluster", cluster], env, args.rounds)

    print()
    print("| what | time | against the previous loader |")
    print("|---|---|---|")
    print(f"| previous loader (commit {PREVIOUS}), load + validate | {prev:.2f} s | 1.00 (anchor) |")
    print(f"| current loader, cold (parses) | {cold:.2f} s | {prev / cold:.1f}x faster |")
    print(f"| current loader, warm (kept parse read back) | {warm:.2f} s | {prev / warm:.1f}x faster |")
    print(f"| `hetflow validate`, process, cold | {validate_cold:.2f} s | |")
    print(f"| `hetflow validate`, process, warm | {validate_warm:.2f} s | |")
    print(f"| `hetflow plan` on hetero-16, process, cold | {plan_cold:.2f} s | |")
    print(f"| `hetflow plan` on hetero-16, process, warm | {plan_warm:.2f} s | |")
    print(f"\nsame result from both loaders (a sample step's templated command): {same}")


if __name__ == "__main__":
    main()
