"""A local run of many small steps: does the state store stay bounded, does the executor's
memory, and do `hetflow ps` and `hetflow show` stay quick while it runs?

    python -m bench.scale [--steps 2000] [--every 2]

One workflow: a fan-out of N items (busybox, each writes one small output; 0.25 CPU and
32 MiB each, so up to 8 run at once on 2 cores) and one step after all of them.  It runs
detached in a private HETFLOW_HOME; while it runs, every ``--every`` seconds, `hetflow ps
--json` and `hetflow show RUN --json` are run as processes and timed (interpreter start
and imports included: what a user waits for), and the executor's resident memory is read
from /proc.  Printed: wall time, the executor's peak RSS (VmHWM), the state store's size
(with its WAL) after the run, rows in the store, and ps/show latency p50/p95/max.
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
from pathlib import Path

from demo.images import build_tiny_image

IMAGE = "localhost/hetflow-test/busybox:latest"


def workflow(n: int) -> str:
    return f"""apiVersion: hetflow/v1
name: scale
steps:
  work:
    image: {IMAGE}
    foreach: {{range: {n}}}
    command: [sh, -c, "echo {{{{ item }}}} > /out/o.txt"]
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


def hetflow(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hetflow.cli.main", *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"hetflow {' '.join(args)} failed: {proc.stderr}")
    return took, proc.stdout


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes; (0, 0) once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    vals = {
        k: int(v.split()[0]) * 1024
        for k, v in (ln.split(":", 1) for ln in text.splitlines())
        if k in ("VmRSS", "VmHWM")
    }
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--every", type=float, default=2.0)
    args = ap.parse_args()
    build_tiny_image(IMAGE)
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-scale-") as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "HETFLOW_HOME": str(home)}
        wf = Path(tmp) / "scale.yaml"
        wf.write_text(workflow(args.steps))
        t0 = time.perf_counter()
        _, out = hetflow(["run", "--detach", str(wf)], env)
        run_id = out.split()[-1] if out.strip() else json.loads(hetflow(["ps", "--json"], env)[1])[0]["id"]
        ps_times: list[float] = []
        show_times: list[float] = []
        peak_rss = 0
        pid = None
        while True:
            took, out = hetflow(["ps", "--all", "--json"], env)
            ps_times.append(took)
            run = next(r for r in json.loads(out) if r["id"].startswith(run_id))
            took, _ = hetflow(["show", run["id"], "--json"], env)
            show_times.append(took)
            pid = run.get("pid") or pid
            if pid:
                peak_rss = max(peak_rss, rss(int(pid))[1])
            if run["state"] not in ("pending", "running"):
                break
            time.sleep(args.every)
        wall = time.perf_counter() - t0
        db = sum(p.stat().st_size for p in home.glob("state.db*"))
        data = json.loads(hetflow(["show", run["id"], "--json"], env)[1])
        steps = len(data["steps"])
        import sqlite3

        con = sqlite3.connect(home / "state.db")
        events = con.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (run["id"],)).fetchone()[0]
        attempts = con.execute("SELECT COUNT(*) FROM attempts WHERE run_id = ?", (run["id"],)).fetchone()[0]
    print(f"run {run['id']}: {run['state']}, {steps} steps ({args.steps} fan-out items + 1) in {wall:.0f} s")
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| wall time | {wall:.0f} s ({wall / steps * 1000:.0f} ms per step) |")
    print(f"| executor peak RSS (VmHWM, sampled every {args.every:g} s) | {peak_rss / 2**20:.0f} MiB |")
    print(f"| state store with WAL, after the run | {db / 2**20:.1f} MiB |")
    print(f"| rows: steps / attempts / events | {steps} / {attempts} / {events} |")
    print(
        f"| `hetflow ps --all --json` during the run, p50 / p95 / max ({len(ps_times)} calls) | "
        f"{statistics.median(ps_times):.2f} / {pct(ps_times, 0.95):.2f} / {max(ps_times):.2f} s |"
    )
    print(
        f"| `hetflow show RUN --json` during the run, p50 / p95 / max ({len(show_times)} calls) | "
        f"{statistics.median(show_times):.2f} / {pct(show_times, 0.95):.2f} / {max(show_times):.2f} s |"
    )


if __name__ == "__main__":
    main()
