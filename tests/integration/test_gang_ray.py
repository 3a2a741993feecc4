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
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from demo.images import MPI_IMAGE
from ray.util.placement_group import placement_group_table

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.ray import RayBackend, gang_request
from hetflow.execute.gang.replicas import replica_name
from hetflow.spec import Gang
from tests.contract.backend_contract import job, wait_done
from tests.integration.hfkit import Hetflow, step_out, write
from tests.integration.ray_fixture import RayCluster, ray_gang_cluster
from tests.integration.test_gang_local import ok_lines

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
    (row,) = json.loads(hf("trace", rid, "--json").stdout)  # rank 0's container, measured by its task
    assert row["peak_rss"] > 1 << 20 and row["cpu_time"] > 0, row


def test_a_failing_replica_fails_and_reruns_the_whole_gang(
    hf: Hetflow, tmp_path: Path, config: str, mpi_image: str
) -> None:
    script = "echo attempt $HETFLOW_ATTEMPT rank $HETFLOW_RANK; if [ $HETFLOW_RANK = 1 ]; then exit 5; fi; sleep 60"
    wf = f"""
apiVersion: hetflow/v1
name: ray-flaky
steps:
  g:
    image: {MPI_IMAGE}
    command: {json.dumps(["sh", "-c", script])}
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


# --- the backend itself: waiting, adoption by name, cancel, release ---------------------


def busybox_gang(run_id: str, step: str, root: Path, script: str, *, gpus: int, replicas: int = 2) -> Job:
    """A gang job as the launcher builds it for a cluster engine: replica templates on the
    host network with their own /out, no GPUs, no launch contract."""
    name = f"hf-{run_id}-{step}-1"
    ranks = []
    for i in range(replicas):
        base = job(replica_name(name, i), root / f"rank{i}", script, run_id=run_id)
        ranks.append(replace(base.container, network_name="host"))
    lead = job(name, root / "rank0", script, run_id=run_id)
    gang = Gang(replicas=replicas, per_node=1, port=29730)
    return replace(lead, container=ranks[0], ranks=tuple(ranks), gang=gang, gpus=gpus, gpu_model="Tesla T4",
                   node_class="gang-t4", nodes=replicas)  # fmt: skip


def test_a_gang_waits_whole_is_adopted_by_name_and_cancelled_whole(
    tmp_path: Path, ray_gang_cluster: RayCluster
) -> None:
    backend, other = RayBackend(ray_gang_cluster.settings()), RayBackend(ray_gang_cluster.settings())
    r = f"g{time.time_ns() % 10**9}"
    # every GPU of both workers: the second gang fits the cluster but must wait, whole
    hold = busybox_gang(r, "hold", tmp_path / "hold", "echo $HETFLOW_RANK > /out/rank; sleep 60", gpus=2)
    wait = busybox_gang(r, "wait", tmp_path / "wait", "echo $HETFLOW_RANK > /out/rank", gpus=2)
    backend.submit(hold)
    backend.submit(wait)
    deadline, states = time.time() + 60, {}
    while time.time() < deadline:
        states = other.poll(r)  # another driver: the keeper answers by name
        if states[hold.name].status == "RUNNING" and all(
            (tmp_path / "hold" / f"rank{i}" / "rank").exists() for i in (0, 1)
        ):
            break
        time.sleep(0.2)
    assert states[hold.name].status == "RUNNING", states
    assert set(states[hold.name].node.split(",")) == {"gang-w1", "gang-w2"}  # type: ignore[union-attr]
    assert set(states) == {hold.name, wait.name}  # one name per gang, no replica of its own
    pending = states[wait.name]
    assert (pending.running, pending.status) == (True, "PENDING"), pending
    assert "waiting" in pending.reason and "reserve every replica at once" in pending.reason, pending.reason
    assert not (tmp_path / "wait" / "rank0" / "rank").exists()  # no replica of it started
    other.cancel([hold.name])  # stops every replica; its group goes, and the waiting gang gets it
    states = wait_done(other, r, [hold.name, wait.name], timeout=60)
    assert states[hold.name].exit_code in (137, 143) and states[hold.name].status == "CANCELLED", states
    assert states[wait.name].exit_code == 0, states
    assert [(tmp_path / "wait" / f"rank{i}" / "rank").read_text().strip() for i in (0, 1)] == ["0", "1"]
    other.release([hold.name, wait.name])
    assert other.poll(r) == {}
    assert not [
        pg for pg in placement_group_table().values() if pg["name"].startswith(f"hf-{r}-") and pg["state"] != "REMOVED"
    ]


def test_a_gang_no_set_of_nodes_can_hold_is_refused(tmp_path: Path, ray_gang_cluster: RayCluster) -> None:
    backend = RayBackend(ray_gang_cluster.settings())
    too_big = busybox_gang("nope", "big", tmp_path, "true", gpus=1, replicas=3)  # 3 per-node replicas, 2 nodes
    with pytest.raises(EngineError, match=r"gang that needs 3 nodes .* have room for 2"):
        backend.submit(too_big)


def test_a_gang_outlives_the_driver_that_submitted_it(tmp_path: Path, ray_gang_cluster: RayCluster) -> None:
    """A hetflow process submits a gang and exits before Ray placed it or its replicas
    ended; this process, another driver, adopts it by name and sees every replica finish."""
    r, devs = f"o{time.time_ns() % 10**9}", ray_gang_cluster.settings().device_dir
    script = textwrap.dedent(f"""
        from pathlib import Path
        from hetflow.execute.backends.ray import RayBackend, RaySettings
        from tests.integration.test_gang_ray import busybox_gang
        b = RayBackend(RaySettings(address={ray_gang_cluster.address!r}, device_dir={devs!r}))
        b.submit(busybox_gang({r!r}, "orphan", Path({str(tmp_path)!r}), "sleep 3; echo $HETFLOW_RANK > /out/x", gpus=1))
        print("result:", b.poll({r!r})[{f"hf-{r}-orphan-1"!r}].status)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "result: PENDING" in proc.stdout or "result: RUNNING" in proc.stdout, proc.stdout
    backend, name = RayBackend(ray_gang_cluster.settings()), f"hf-{r}-orphan-1"
    assert backend.poll(r)[name].running  # the driver is gone, the gang is not
    states = wait_done(backend, r, [name], timeout=60)
    assert states[name].exit_code == 0, states
    assert [(tmp_path / f"rank{i}" / "x").read_text().strip() for i in (0, 1)] == ["0", "1"]
    backend.release([name])


def test_a_gang_ray_cannot_place_stays_pending_and_says_so(tmp_path: Path, ray_gang_cluster: RayCluster) -> None:
    """A group no set of alive nodes can hold (as after nodes left: submit refuses one up
    front, so this goes to the keeper directly) is PENDING and says why, not silent: Ray
    itself calls a STRICT_SPREAD group short of nodes NO_RESOURCES, as if they were busy."""
    backend, r = RayBackend(ray_gang_cluster.settings()), f"i{time.time_ns() % 10**9}"
    job3 = busybox_gang(r, "far", tmp_path, "true", gpus=1, replicas=3)
    two = gang_request(busybox_gang(r, "far", tmp_path, "true", gpus=1), backend.nodes(refresh=True))
    req = replace(two, replicas=3)  # three replicas, one per node, on the type's two nodes
    s = backend.settings
    keeper = backend._new_keeper(r)
    ray.get(keeper.submit_gang.remote(job3.name, job3.ranks, job3.gang, req, s.device_dir, s.stop_timeout))
    deadline, st = time.time() + 60, None
    while time.time() < deadline:
        st = backend.poll(r)[job3.name]
        if "waits for nodes to join" in st.reason:
            break
        time.sleep(0.3)
    assert st is not None and (st.running, st.status) == (True, "PENDING"), st
    assert "needs 3 nodes that each hold one replica" in st.reason, st.reason
    assert "have room for 2 (2 of 3 hold one replica)" in st.reason, st.reason
    backend.cancel([job3.name])
    assert backend.poll(r)[job3.name].status == "CANCELLED"
    backend.release([job3.name])
