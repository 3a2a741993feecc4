"""``make demo-slurm`` / ``make demo-ray``: start a local test cluster of that engine on this
one machine and run examples/circuit on it with ``hetflow run --backend ...``.

    python -m demo.clusters slurm|ray

The test clusters' GPUs are fake (mknod'd device nodes), so the cluster file given to the
planner describes the nodes' CPUs only: CUDA code is not sent to a GPU that is not there,
and the GPU-only `litho` step is skipped as optional, with its reason.

Every step runs on the cluster on every run (``--no-cache``: after ``make demo`` the cross-run
cache would serve them all).  After the run it prints hetflow's view (``show``: STARTED and
ELAPSED are the engine's; ``trace``: peak memory and CPU time measured on the node) beside the
scheduler's own: squeue's record of each job (Slurm), Ray's task events (``ray.timeline``:
the dashboard's ``ray list tasks`` needs ray[default]).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from hetflow.config import hetflow_home

ROOT = Path.cwd()


def _cluster_file(names: list[str], cores: int) -> str:
    types = [{"name": n, "count": 1, "cores": cores, "memory": "3Gi", "price": 0.5 + i} for i, n in enumerate(names)]
    doc = {
        "apiVersion": "hetflow/v1",
        "kind": "Cluster",
        "name": "local-test",
        "bandwidth": "10Gbit/s",
        "nodeTypes": types,
    }
    return yaml.safe_dump(doc, sort_keys=False)


@contextmanager
def _slurm(work: Path) -> Iterator[dict[str, Any]]:
    from demo.slurm.cluster import start_cluster

    base = Path(tempfile.mkdtemp(prefix="hfslurm-", dir="/tmp"))  # short: slurmd's sockets live here
    cluster = start_cluster(base)
    print(f"Slurm test cluster up: {', '.join(n.name for n in cluster.nodes)} (SLURM_CONF={cluster.conf_path})")
    try:
        (work / "cluster.yaml").write_text(_cluster_file([n.name for n in cluster.nodes], 2))
        yield {
            "backend": "slurm",
            "cluster": str(work / "cluster.yaml"),
            "workdir": str(base / "work" / "runs"),
            "slurm": {
                "partition": cluster.partition,
                "slurm_conf": str(cluster.conf_path),
                "device_dir": cluster.device_dir,
                "stop_timeout": 5,
            },
        }
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def _ray(work: Path) -> Iterator[dict[str, Any]]:
    import ray
    from ray.cluster_utils import Cluster

    from hetflow.execute.backends.ray import NODE_LABEL, NODE_RESOURCE

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "resources": {NODE_RESOURCE + "ray-head": 1}}
    )
    cluster.add_node(num_cpus=2, labels={NODE_LABEL: "ray-worker"})
    cluster.wait_for_nodes()
    print(f"Ray test cluster up at {cluster.address}: ray-head, ray-worker")
    try:
        (work / "cluster.yaml").write_text(_cluster_file(["ray-head", "ray-worker"], 2))
        yield {"backend": "ray", "cluster": str(work / "cluster.yaml"), "ray": {"address": cluster.address}}
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("slurm", "ray"):
        print("usage: python -m demo.clusters slurm|ray", file=sys.stderr)
        return 2
    work = hetflow_home() / f"demo-{argv[0]}"
    work.mkdir(parents=True, exist_ok=True)
    starter = _slurm if argv[0] == "slurm" else _ray
    with starter(work) as settings:
        config = work / "config.yaml"
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        hetflow = [sys.executable, "-m", "hetflow.cli.main"]
        print(f"$ hetflow run --no-cache --config {config} examples/circuit/workflow.yaml", flush=True)
        rc = subprocess.run(
            [*hetflow, "run", "--no-cache", "--config", str(config), str(ROOT / "examples/circuit/workflow.yaml")],
            check=False,
        ).returncode
        listed = subprocess.run([*hetflow, "ps", "--all", "--json"], capture_output=True, text=True, check=False)
        run_id = json.loads(listed.stdout)[0]["id"] if listed.returncode == 0 and listed.stdout.strip() else None
        if run_id is None:
            return rc or 1
        for command in (["show", run_id], ["trace", run_id, "-f", "step,node,status,start,realtime,peak_rss,cpu_time"]):
            print(f"\n$ hetflow {' '.join(command)}", flush=True)
            subprocess.run([*hetflow, *command], check=False)
        if argv[0] == "slurm":
            _slurm_view(run_id, str(settings["slurm"]["slurm_conf"]))
        else:
            _ray_view(run_id, str(settings["ray"]["address"]))
    return rc


def _slurm_view(run_id: str, conf: str) -> None:
    """squeue's record of the run's jobs (MinJobAge keeps finished ones): Slurm's own times."""
    fmt = "%.8i %.30j %.10T %.10r %.8N %.20S %.20e"
    print(f"\n$ squeue --me --states=all --format='{fmt}'   (the run's jobs: Slurm's own view)", flush=True)
    env = {**os.environ, "SLURM_CONF": conf}
    proc = subprocess.run(
        ["squeue", "--me", "--states=all", f"--format={fmt}"], env=env, capture_output=True, text=True, check=False
    )
    lines = proc.stdout.splitlines()
    mine = sorted((line for line in lines[1:] if f"hf-{run_id}-" in line), key=lambda line: int(line.split()[0]))
    print("\n".join(lines[:1] + mine) or proc.stderr)


def _ray_view(run_id: str, address: str) -> None:
    """Ray's own record of the run's step tasks: the task events GCS keeps (``ray.timeline``)."""
    import logging

    import ray

    if not ray.is_initialized():
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)

    logging.getLogger("ray").setLevel(logging.ERROR)  # not its note that timeline() will need the dashboard
    print("\n$ python -c 'ray.timeline()'   (the run's step tasks: Ray's own view)", flush=True)
    print(f"{'TASK':<34} {'STARTED':>12} {'ENDED':>12} {'ELAPSED':>8}")
    rows = []
    for e in ray.timeline():  # Chrome trace events; one "task::NAME" span per task, in microseconds
        name = str(e.get("cat", "")).removeprefix("task::")
        if e.get("ph") == "X" and name.startswith(f"hf-{run_id}-"):
            start, dur = float(e["ts"]) / 1e6, float(e["dur"]) / 1e6
            rows.append((start, name, dur))
    for start, name, dur in sorted(rows):
        print(f"{name:<34} {_clock(start):>12} {_clock(start + dur):>12} {dur:>7.1f}s")


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 10)}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
