"""A local run of many small steps: does the state store stay bounded, does the executor's
memory, and do `hetflow ps` and `hetflow show` stay quick while it runs?

    python -m bench.local.scale [--steps 2000] [--every 2]

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


def workflow(n: int, batch: str = "") -> str:
    """``batch``: the fan-out's ``batch:`` ("" leaves it out: hetflow batches it by itself)."""
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
{f"    batch: {batch}" + chr(10) if batch else ""}  done:
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


def measure(steps: int = 2000, every: float = 2.0, batch: str = "") -> dict[str, float]:
    """Run the fan-out detached and sample ps/show (processes) and the executor's memory."""
    build_tiny_image(IMAGE)
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-scale-") as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "HETFLOW_HOME": str(home)}
        wf = Path(tmp) / "scale.yaml"
        wf.write_text(workflow(steps, batch))
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
            time.sleep(every)
        wall = time.perf_counter() - t0
        db = sum(p.stat().st_size for p in home.glob("state.db*"))
        data = json.loads(hetflow(["show", run["id"], "--json"], env)[1])
        import sqlite3

        con = sqlite3.connect(home / "state.db")
        events = con.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (run["id"],)).fetchone()[0]
        attempts = con.execute("SELECT COUNT(*) FROM attempts WHERE run_id = ?", (run["id"],)).fetchone()[0]
    return {
        "state_ok": float(run["state"] == "succeeded"),
        "steps": float(len(data["steps"])),
        "wall_s": wall,
        "peak_rss": float(peak_rss),
        "db_bytes": float(db),
        "attempts": float(attempts),
        "events": float(events),
        "calls": float(len(ps_times)),
        "ps_p50_s": statistics.median(ps_times),
        "ps_p95_s": pct(ps_times, 0.95),
        "ps_max_s": max(ps_times),
        "show_p50_s": statistics.median(show_times),
        "show_p95_s": pct(show_times, 0.95),
        "show_max_s": max(show_times),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--every", type=float, default=2.0)
    ap.add_argument("--batch", default="", help="the fan-out's batch: (false: a container each, as before issue 26)")
    args = ap.parse_args()
    m = measure(args.steps, args.every, args.batch)
    steps = int(m["steps"])
    print(f"{steps} steps ({args.steps} fan-out items + 1), batch: {args.batch or '(automatic)'}")
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| wall time | {m['wall_s']:.0f} s ({m['wall_s'] / steps * 1000:.0f} ms per step) |")
    print(f"| executor peak RSS (VmHWM, sampled every {args.every:g} s) | {m['peak_rss'] / 2**20:.0f} MiB |")
    print(f"| state store with WAL, after the run | {m['db_bytes'] / 2**20:.1f} MiB |")
    print(f"| rows: steps / attempts / events | {steps} / {m['attempts']:.0f} / {m['events']:.0f} |")
    for cmd, k in (("ps --all --json", "ps"), ("show RUN --json", "show")):
        print(
            f"| `hetflow {cmd}` during the run, p50 / p95 / max ({m['calls']:.0f} calls) | "
            f"{m[k + '_p50_s']:.2f} / {m[k + '_p95_s']:.2f} / {m[k + '_max_s']:.2f} s |"
        )


if __name__ == "__main__":
    main()
