"""``make demo-slurm`` / ``make demo-ray``: start a local test cluster of that engine on this
one machine and run examples/circuit on it with ``hetflow run --backend ...``.

    python -m demo.clusters slurm|ray

The test clusters' GPUs are fake (mknod'd device nodes), so the cluster file given to the
planner describes the nodes' CPUs only: CUDA code is not sent to a GPU that is not there,
and the GPU-only `litho` step is skipped as optional, with its reason.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
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
    from demo.slurm_cluster import start_cluster

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
        print(f"$ hetflow run --config {config} examples/circuit/workflow.yaml", flush=True)
        rc = subprocess.run(
            [*hetflow, "run", "--config", str(config), str(ROOT / "examples/circuit/workflow.yaml")], check=False
        ).returncode
        subprocess.run([*hetflow, "ps", "--all"], check=False)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
