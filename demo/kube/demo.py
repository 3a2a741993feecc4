"""``make demo-kubernetes``: hetflow on a local Kubernetes control plane (demo/kube/cluster.py),
end to end, in two parts, each cluster stopped before the next starts (and on any failure):

1. kwok's simulated nodes (two CPU nodes, an A100 and a T4 node through the device plugin, an
   H100 node through DRA): ``hetflow nodes --backend kubernetes`` lists them from the API
   server, ``--json`` writes them as a cluster file, and ``hetflow plan --explain`` places the
   circuit example's GPU steps on them.  kwok runs no container, so nothing is run here.
2. One real node (containerd and a kubelet, demo/kube/kubelet.py) with the examples' NumPy
   image: ``hetflow run --backend kubernetes`` runs the circuit example as real pods (planned
   from the API: no cluster file; ``litho`` is GPU-only and optional, so it is skipped with its
   reason: the node has no GPU), then ``hetflow show`` and ``hetflow logs RUN signoff``.

    python -m demo.kube.demo
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from demo.images import NUMPY_IMAGE, build_examples, build_tiny_image
from demo.kube.cluster import nodes_table, start_cluster, stop_cluster
from demo.kube.kubelet import start_node
from hetflow.config import hetflow_home
from hetflow.errors import HetflowError

ROOT = Path(__file__).resolve().parents[2]
CIRCUIT = ROOT / "examples" / "circuit" / "workflow.yaml"
REAL_NODE = "real-0"


class DemoError(Exception):
    """A command of the demo failed (its output was shown)."""


def _hetflow(*args: str, env: dict[str, str], out: Path | None = None, timeout: float = 600) -> str:
    """Run ``hetflow ARGS`` as a user would (shown first), its output shown or written to ``out``."""
    shown = "hetflow " + shlex.join(args) + (f" > {out}" if out else "")
    print(f"\n$ {shown}", flush=True)
    argv = [sys.executable, "-m", "hetflow.cli.main", *args]
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    if out is not None:
        out.write_text(done.stdout)
    elif done.stdout.strip():
        print(done.stdout.rstrip(), flush=True)
    if done.stderr.strip():
        print(done.stderr.rstrip(), file=sys.stderr, flush=True)
    if done.returncode != 0:
        raise DemoError(f"`{shown}` exited {done.returncode}")
    return done.stdout


def _section(title: str) -> None:
    print(f"\n== {title}", flush=True)


def simulated(home: Path, env: dict[str, str]) -> None:
    """Part 1: the kwok cluster, listed and planned on."""
    _section("1. kwok's simulated GPU nodes: hetflow lists them from the API server and plans the circuit on them")
    base = Path(tempfile.mkdtemp(prefix="hfkdemo-", dir="/tmp"))
    try:
        t0 = time.monotonic()
        cluster = start_cluster(base)
        print(f"control plane + kwok up in {time.monotonic() - t0:.1f} s: {cluster.server}", flush=True)
        print(nodes_table(cluster), flush=True)
        kube_env = {**env, "KUBECONFIG": str(cluster.kubeconfig)}
        _hetflow("nodes", "--backend", "kubernetes", env=kube_env)
        cluster_file = home / "k8s-cluster.json"
        _hetflow("nodes", "--backend", "kubernetes", "--json", env=kube_env, out=cluster_file)
        _hetflow("plan", str(CIRCUIT), "--cluster", str(cluster_file), "--explain", env=kube_env)
    finally:
        start = time.monotonic()
        cluster_stop(base)
        print(f"\nstopped the kwok cluster ({time.monotonic() - start:.1f} s)", flush=True)


def cluster_stop(base: Path) -> None:
    """Stop the cluster's processes (by its own pid files) and remove its folder."""
    stop_cluster(base)
    shutil.rmtree(base, ignore_errors=True)


def real(home: Path, env: dict[str, str]) -> None:
    """Part 2: the circuit example as real pods on a real kubelet."""
    _section("2. a real node (containerd + kubelet): hetflow runs the circuit example as real pods through Kubernetes")
    images = (build_tiny_image(), NUMPY_IMAGE)
    base = Path(tempfile.mkdtemp(prefix="hfkdemo-", dir="/tmp"))  # short: containerd's sockets live under it
    node = None
    try:
        t0 = time.monotonic()
        cluster = start_cluster(base / "c", nodes=())
        node = start_node(base / "n", cluster.kubeconfig, "", REAL_NODE, images=images)
        print(f"control plane + node {REAL_NODE} ({node.ip}) up in {time.monotonic() - t0:.1f} s", flush=True)
        work = home / "demo-kubernetes" / "runs"  # kept after the demo: hetflow show/logs/ui still find the outputs
        work.mkdir(parents=True, exist_ok=True)
        config = home / "k8s-config.yaml"
        settings = {
            "backend": "kubernetes",
            "workdir": str(work),
            "kubernetes": {"kubeconfig": str(cluster.kubeconfig), "image_pull_policy": "Never"},
        }
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        print(f"\n$ cat {config}\n{config.read_text().rstrip()}", flush=True)
        # --no-cache: every step runs on the cluster (the cross-run cache may hold them from `make demo`)
        _hetflow("run", "--no-cache", "--config", str(config), str(CIRCUIT), env=env)
        run_id = _last_run(env)
        _hetflow("show", run_id, env=env)
        _hetflow("logs", run_id, "signoff", env=env)
        print(f"\nthe sign-off report: {work / run_id / 'steps' / 'signoff' / 'out' / 'report.json'}", flush=True)
    finally:
        start = time.monotonic()
        if node is not None:
            node.stop()
        cluster_stop(base / "c")
        shutil.rmtree(base, ignore_errors=True)
        print(f"\nstopped the node and the control plane ({time.monotonic() - start:.1f} s)", flush=True)


def _last_run(env: dict[str, str]) -> str:
    """The newest run's id (``hetflow ps --all --json`` lists newest first)."""
    argv = [sys.executable, "-m", "hetflow.cli.main", "ps", "--all", "--json"]
    listed = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return str(json.loads(listed.stdout)[0]["id"])


def main() -> int:
    home = hetflow_home()
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # never a user's own cluster
    t0 = time.monotonic()
    try:
        build_examples(ROOT / "examples", gpu=False, mpi=False, log=lambda m: print(f"  {m}", flush=True))
        simulated(home, env)
        real(home, env)
    except (DemoError, HetflowError, subprocess.SubprocessError) as exc:
        print(f"\ndemo-kubernetes failed: {exc}", file=sys.stderr)
        return 1
    print(f"\ndemo-kubernetes: both parts done in {time.monotonic() - t0:.0f} s, nothing left running", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
