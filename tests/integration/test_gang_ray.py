"""Gang steps through `hetflow run` with backend: ray, on a Ray cluster of one head and two
identical worker nodes (ray_fixture.ray_gang_cluster): each gang is one placement group,
its replicas Ray tasks pinned to its bundles, on the host network of this one machine.

The GPUs are FAKE (mknod'd device nodes, numbered by Ray): these tests prove that each
replica is given exactly the one device Ray assigned it, not GPU computation; the allreduces
run on CPUs (Open MPI over TCP, plain sockets for the torchrun-style one).

Ports: 29700 and up (the Slurm gang tests use 29500-29600 on the host network)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from demo.images import MPI_IMAGE, build_mpi_image
from ray.util.placement_group import placement_group_table

from tests.integration.hfkit import Hetflow, step_out, write
from tests.integration.ray_fixture import RayCluster, ray_gang_cluster
from tests.integration.test_gang_local import EXAMPLES, ok_lines

__all__ = ["ray_gang_cluster"]  # the module fixture

# A node type of two identical nodes for the gangs (the planner spreads a gang over nodes of
# one type); the head is a type of one, pinned to the head by name.
CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: ray-gangs
bandwidth: 10Gbit/s
nodeTypes:
  - {name: gang-head, count: 1, cores: 2, memory: 3Gi, price: 0.5}
  - {name: gang-t4, count: 2, cores: 2, memory: 3Gi, price: 0.8,
     gpus: {model: Tesla T4, count: 2, memory: 16Gi, computeCapability: "7.5"}}
"""


@pytest.fixture(scope="module")
def mpi_image() -> str:
    return build_mpi_image(EXAMPLES, log=lambda _: None)


@pytest.fixture
def config(tmp_path: Path, ray_gang_cluster: RayCluster) -> str:
    settings = {
        "backend": "ray",
        "cluster": write(tmp_path, CLUSTER, "cluster.yaml"),
        "ray": {
            "address": ray_gang_cluster.address,
            "device_dir": f"{ray_gang_cluster.devs}/{{node}}",
            "stop_timeout": 2,
        },
    }
    return write(tmp_path, yaml.safe_dump(settings), "config.yaml")


class PlacementWatch:
    """Which Ray node each bundle of the run's placement groups was reserved on, read from
    Ray's own table while the gangs run (a group is removed when its gang ends)."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[int, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PlacementWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            table: dict[str, Any] = placement_group_table()
            for pg in table.values():
                if pg["state"] == "CREATED" and pg["name"].startswith("hf-"):
                    self.seen[pg["name"]] = dict(pg["bundles_to_node_id"])
            self._stop.wait(0.05)


def test_mpi_gang_runs_across_two_ray_nodes(hf: Hetflow, tmp_path: Path, config: str, mpi_image: str) -> None:
    wf = f"""
apiVersion: hetflow/v1
name: ray-mpi
steps:
  mpi:
    image: {MPI_IMAGE}
    command: [python3, /app/gang/allreduce.py]
    resources: {{cpus: 0.5, memory: 256Mi}}
    gang: {{replicas: 2, per_node: 1, launcher: mpi, port: 29700}}
"""
    with PlacementWatch() as watch:
        hf("run", "-q", "--config", config, write(tmp_path, wf), timeout=180)
    rid = hf.last_run()
    (mpi,) = hf.show(rid)["steps"]
    assert (mpi["state"], mpi["attempts"]) == ("succeeded", 1)
    # mpirun in replica 0 gathers every rank's output: both ranks reduced 1 + 2
    lines = ok_lines(hf("logs", rid, "mpi").stdout)
    assert [line.split(" on ")[0] for line in lines] == ["rank 0/2", "rank 1/2"], lines
    # the gang's one placement group put its two bundles on two different Ray nodes
    (bundles,) = [b for name, b in watch.seen.items() if name.startswith(f"hf-{rid}-mpi-")]
    assert len(bundles) == 2 and bundles[0] != bundles[1], bundles
    workers = {n["NodeID"] for n in ray.nodes() if n["Alive"] and "hetflow/node-type:gang-t4" in n["Resources"]}
    assert set(bundles.values()) == workers


def test_torch_gang_gives_each_replica_one_gpu_on_its_own_node(
    hf: Hetflow, tmp_path: Path, config: str, mpi_image: str
) -> None:
    see = (
        "ls /dev | grep -E '^nvidia[0-9]+$' | sed 's/^/dev: /'; "
        'echo "node: $HETFLOW_NODE cuda: $CUDA_VISIBLE_DEVICES master: $MASTER_ADDR:$MASTER_PORT"; '
        "python3 /app/gang/torch_allreduce.py && echo $RANK > /out/rank.txt"
    )
    wf = f"""
apiVersion: hetflow/v1
name: ray-torch
steps:
  torch:
    image: {MPI_IMAGE}
    command: {json.dumps(["sh", "-c", see])}
    resources: {{cpus: 0.5, memory: 256Mi, gpus: 1}}
    outputs: [rank.txt]
    gang: {{replicas: 2, per_node: 1, launcher: torch, port: 29710}}
"""
    hf("run", "-q", "--config", config, write(tmp_path, wf), timeout=180)
    rid = hf.last_run()
    (torch,) = hf.show(rid)["steps"]
    assert (torch["state"], torch["attempts"]) == ("succeeded", 1)
    assert (step_out(hf, rid, "torch") / "rank.txt").read_text().strip() == "0"
    nodes = set()
    for rank in (0, 1):
        log = hf("logs", rid, "torch", "--rank", str(rank)).stdout
        (result,) = ok_lines(log)
        assert result.startswith(f"rank {rank}/2 "), log
        devs = re.findall(r"dev: (nvidia\d+)", log)
        assert len(devs) == 1, log  # one device node of the node's two: the one Ray assigned
        (where,) = re.findall(r"node: (\S+) cuda: (\S+) master: (\S+)", log)
        assert where[1] == "0" and where[2].endswith(":29710"), where  # numbered 0 inside
        nodes.add(where[0])
    assert nodes == {"gang-w1", "gang-w2"}


def test_a_failing_replica_fails_and_reruns_the_whole_gang(
    hf: Hetflow, tmp_path: Path, config: str, mpi_image: str
) -> None:
    wf = f"""
apiVersion: hetflow/v1
name: ray-flaky
steps:
  g:
    image: {MPI_IMAGE}
    command: [sh, -c, "echo attempt $HETFLOW_ATTEMPT rank $HETFLOW_RANK; if [ $HETFLOW_RANK = 1 ]; then exit 5; fi; sleep 60"]
    resources: {{cpus: 0.5, memory: 128Mi}}
    retries: 1
    gang: {{replicas: 2, per_node: 1, port: 29720}}
"""
    proc = hf("run", "-q", "--config", config, write(tmp_path, wf), timeout=120, check=False)
    assert proc.returncode != 0
    rid = hf.last_run()
    data = hf.show(rid)
    (g,) = data["steps"]
    assert (g["state"], g["attempts"], g["exit_code"]) == ("failed", 2, 5), g
    # both attempts ran both replicas; replica 0 (sleep 60) was stopped, not waited for
    for attempt in (1, 2):
        assert f"attempt {attempt} rank 0" in hf("logs", rid, "g", "--attempt", str(attempt)).stdout
