"""Many small steps on Slurm: ``python -m bench.engines.slurmpack [--items 10000] [--batch 200]``.

A fan-out of N trivial items (busybox, each writes one small output) and a gather, run by
``hetflow run --backend slurm`` on the local two-node test cluster (demo/slurm/cluster.py)
with ``batch:`` on the fan-out.  Counted: the jobs Slurm itself holds for the run
(``scontrol show job``: one per ``sbatch`` call), against one job per step, which is what
Slurm's high-throughput guide warns against; and the wall time of the whole ``hetflow run``
(planning included).  The cluster's slurmd run on this machine: it measures hetflow's and
Slurm's own costs, not a network.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml
from demo.images import TINY_IMAGE, build_tiny_image
from demo.slurm.cluster import CLUSTER_FILE as CLUSTER
from demo.slurm.cluster import LocalSlurm, cluster_running, start_cluster, stop_cluster

from hetflow.errors import EngineError


def workflow(items: int, batch: int, image: str) -> str:
    return f"""apiVersion: hetflow/v1
name: slurmpack
steps:
  work:
    image: {image}
    foreach: {{range: {items}}}
    command: [sh, -c, "echo {{{{ item }}}} > /out/o.txt"]
    resources: {{cpus: 1, memory: 64Mi}}
    estimate: 0.1s
    outputs: [o.txt]
    batch: {batch}
  gather:
    image: {image}
    needs: [work]
    inputs: {{parts: work/o.txt}}
    command: [sh, -c, "ls /in/parts | wc -l > /out/n.txt"]
    resources: {{cpus: 1, memory: 64Mi}}
    outputs: [n.txt]
"""


def slurm_pack(cluster: LocalSlurm, items: int = 10_000, batch: int = 200) -> dict[str, float]:
    """Run the fan-out through hetflow on ``cluster``; the run's Slurm jobs and its wall time."""
    image = build_tiny_image(TINY_IMAGE)
    with tempfile.TemporaryDirectory(prefix="hf-slurmpack-") as tmp:
        d = Path(tmp)
        (d / "cluster.yaml").write_text(CLUSTER)
        settings = {
            "backend": "slurm",
            "cluster": str(d / "cluster.yaml"),
            "workdir": str(cluster.workdir / "runs"),
            "slurm": {
                "partition": cluster.partition,
                "slurm_conf": str(cluster.conf_path),
                "device_dir": cluster.device_dir,
            },
        }
        (d / "config.yaml").write_text(yaml.safe_dump(settings))
        (d / "wf.yaml").write_text(workflow(items, batch, image))
        env = {**os.environ, "HETFLOW_HOME": str(d / "home")}
        hetflow = [sys.executable, "-m", "hetflow.cli.main"]
        t0 = time.monotonic()
        proc = subprocess.run(
            [*hetflow, "run", "-q", "--config", str(d / "config.yaml"), str(d / "wf.yaml")],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise EngineError(f"hetflow run failed: {proc.stderr.strip()[-2000:]}")
        runs = json.loads(
            subprocess.run(
                [*hetflow, "ps", "--all", "--json"], env=env, capture_output=True, text=True, check=True
            ).stdout
        )
        run_id = runs[0]["id"]
        jobs = subprocess.run(
            ["scontrol", "show", "job", "--oneliner"], env=cluster.env, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        mine = [line for line in jobs if f"JobName=hf-{run_id}-" in line]
    return {"steps": items + 1, "sbatch_calls": len(mine), "wall_s": wall}


def sbatch_calls(items: int = 10_000, batch: int = 200, base: Path = Path("/tmp/hf-slurmpack")) -> dict[str, float]:
    """``slurm_pack`` on the local test cluster, started for it (and stopped after) if not running."""
    running = cluster_running(base)
    cluster = start_cluster(base)
    try:
        return slurm_pack(cluster, items, batch)
    finally:
        if running is None:
            stop_cluster(base)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.engines.slurmpack", description=__doc__)
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--base", type=Path, default=Path("/tmp/hf-slurmpack"), help="the test cluster's folder")
    args = ap.parse_args(argv)
    try:
        got = sbatch_calls(args.items, args.batch, args.base)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"{got['steps']} steps (fan-out of {args.items} + gather, batch: {args.batch}) on the local Slurm cluster")
    print(f"sbatch calls: {got['sbatch_calls']} (one job per step: {got['steps']}); target at most 100")
    print(f"wall time of hetflow run: {got['wall_s']:.1f} s ({got['wall_s'] / got['steps'] * 1000:.1f} ms a step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
