"""Planning at scale and the read commands' latency, each with an anchor from the same run.

    python -m bench.planning.planscale [--steps 10000] [--rounds 3]

1. Plan only: ``plan_heuristic`` (hetflow's planner: its portfolio of list passes) on the
   10,000-step workflow of ``bench.local.loader`` on hetero-16 with every count multiplied by 16
   (256 nodes), the instance built beforehand.  Anchor: plain HEFT (one list pass, no
   portfolio) on the same instance in the same run; the plans are checked with
   ``check_plan``.  With ``wfcommons`` installed (the bench extra) also the scale table's
   10,000-step Epigenomics workflow of ``bench.planning.planner`` on the same 256 nodes.
2. A cold ``hetflow plan FILE --cluster hetero-16.yaml`` of that file as a process
   (interpreter start, imports, parse with no kept parse, instance, plan, printing).
   Anchor: ``python -c pass``.
3. ``hetflow ps --all --json`` and ``hetflow show RUN --json`` as processes on a store with
   one run of 2,001 pending steps: what a poll costs beyond the interpreter's start.  Anchor: ``python -c pass``.

Every time is the median of ``--rounds`` (latencies: p50 and p95 of ``--rounds`` x 5 calls).
``measure()`` returns the figures as a dict (``bench.local.throughput`` prints them in its table).
Timings on a shared machine are noisy: compare each figure with its anchor from the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.local.loader import generate, median_time
from bench.local.scale import pct
from bench.speedrow import Row, emit

ROOT = Path(__file__).resolve().parents[2]
HETERO16 = ROOT / "examples" / "clusters" / "hetero-16.yaml"


def _process(args: list[str], env: dict[str, str], check: bool = True) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=check, capture_output=True)
    return time.perf_counter() - t0


def plan_figures(path: Path, rounds: int, *, wfcommons: bool = True) -> dict[str, Any]:
    """hetflow's planner and plain HEFT on the file's workflow on 256 nodes (and, with
    ``wfcommons`` and the package installed, on the generated Epigenomics workflow)."""
    from hetflow.plan.build import build_instance
    from hetflow.plan.checking.validate import check_plan
    from hetflow.plan.search.heuristic import heft, plan_heuristic
    from hetflow.plan.sizing.cluster import load_cluster
    from hetflow.spec import load_workflow

    cluster = load_cluster(HETERO16)
    classes = tuple(replace(c, count=c.count * 16) for c in cluster.classes())
    out: dict[str, Any] = {"nodes": sum(c.count for c in classes)}
    cases = [("generated", load_workflow(path).workflow)]
    try:
        if not wfcommons:
            raise ImportError("not asked for")
        from bench.planning.planner import generated_trace
        from hetflow.spec.load.wfcommons import workflow_from_wfcommons

        cases.append(("epigenomics", workflow_from_wfcommons(generated_trace("EpigenomicsRecipe", 10_000, 0))))
    except ImportError:  # wfcommons (the bench extra) is not installed
        pass
    for name, workflow in cases:
        inst = build_instance(workflow, classes, bandwidth=cluster.bandwidth_bytes)
        hetflow_plan, anchor = plan_heuristic(inst), heft(inst)
        check_plan(inst, hetflow_plan)
        check_plan(inst, anchor)
        out[name] = {
            "steps": len(inst.tasks),
            "hetflow_s": median_time(lambda inst=inst: plan_heuristic(inst), rounds),  # type: ignore[misc]
            "heft_s": median_time(lambda inst=inst: heft(inst), rounds),  # type: ignore[misc]
            "hetflow_makespan": hetflow_plan.makespan,
            "heft_makespan": anchor.makespan,
        }
    return out


def _one_run(env: dict[str, str], steps: int = 2000) -> str:
    """A store with one run of ``steps`` pending steps (what `show` reads, as bench.local.scale's
    2,000-item fan-out), written by hetflow's own store; its id, or "" if that failed."""
    code = (
        "import os\n"
        "from hetflow.cli.common import open_store\n"
        "open_store().create_run(run_id='bench0001', name='bench', workflow_file='/dev/null', spec_json='{}',"
        " params_json='{}', uid=os.getuid(), gid=os.getgid(), workdir='/tmp',"
        f" steps=[f'work.{{i}}' for i in range({steps})] + ['done'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return "bench0001" if done.returncode == 0 else ""


def cli_figures(path: Path, rounds: int) -> dict[str, float]:
    """The cold `hetflow plan` and the read commands as processes, with `python -c pass`."""
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-planscale-") as home:
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": home}
        cold = {**env, "HETFLOW_NO_PARSE_CACHE": "1"}
        plan = ["-m", "hetflow.cli.main", "plan", str(path), "--cluster", str(HETERO16)]
        out: dict[str, float] = {"plan_cold_s": median_time(lambda: _process(plan, cold), rounds)}
        run_id = _one_run(env) or "none"
        calls = max(5, rounds * 5)
        starts, ps, show = [], [], []
        for _ in range(calls):  # interleaved, so that a busy moment hits all three alike
            starts.append(_process(["-c", "pass"], env))
            ps.append(_process(["-m", "hetflow.cli.main", "ps", "--all", "--json"], env))
            show.append(_process(["-m", "hetflow.cli.main", "show", run_id, "--json"], env, check=run_id != "none"))
        out |= {
            "python_start_s": statistics.median(starts),
            "python_start_p95_s": pct(starts, 0.95),
            "ps_p50_s": statistics.median(ps),
            "ps_p95_s": pct(ps, 0.95),
            "show_p50_s": statistics.median(show),
            "show_p95_s": pct(show, 0.95),
            "show_had_a_run": float(run_id != "none"),
        }
    return out


def measure(steps: int = 10_000, rounds: int = 3) -> dict[str, Any]:
    """Every figure of the module docstring, as a dict (seconds; makespans in seconds)."""
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-planscale-") as tmp:
        path = Path(tmp) / "big.yaml"
        path.write_text(generate(steps))
        return {"plan": plan_figures(path, rounds), "cli": cli_figures(path, rounds), "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    got = measure(args.steps, args.rounds)
    plan, cli = got["plan"], got["cli"]
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; medians of {args.rounds}")
    print("\n| what | hetflow | anchor (same run) | ratio |")
    print("|---|---|---|---|")
    for name in ("generated", "epigenomics"):
        if name in plan:
            p = plan[name]
            print(
                f"| plan only, {name} {p['steps']} steps x {plan['nodes']} nodes (makespan"
                f" {p['hetflow_makespan']:.0f} s vs HEFT's {p['heft_makespan']:.0f} s) | {p['hetflow_s']:.2f} s |"
                f" HEFT {p['heft_s']:.2f} s |"
                f" {p['hetflow_s'] / p['heft_s']:.2f}x |"
            )
    start = cli["python_start_s"]
    print(f"| cold `hetflow plan` of the {got['steps']}-step file, hetero-16, process | {cli['plan_cold_s']:.2f} s |"
          f" `python -c pass` {start:.2f} s | |")  # fmt: skip
    for label, key in (("hetflow ps --all --json", "ps"), ("hetflow show RUN --json", "show")):
        print(
            f"| `{label}`, p50 / p95 | {cli[f'{key}_p50_s']:.2f} / {cli[f'{key}_p95_s']:.2f} s |"
            f" `python -c pass` {start:.2f} / {cli['python_start_p95_s']:.2f} s | |"
        )
    if not cli["show_had_a_run"]:
        print("(show read no run: the store's run could not be made; its figure is a failed lookup)")
    emit(
        Row(
            f"cold hetflow plan of {got['steps']} steps under 2 s",
            cli["plan_cold_s"],
            "s",
            "python -c pass",
            start,
            2.0,
            "bench.planning.planscale",
        )
    )


if __name__ == "__main__":
    main()
