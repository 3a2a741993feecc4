"""Gang steps on a real (local) Slurm cluster of two identical slurmd nodes: one batch job of
N tasks started with srun, a real ``mpirun`` allreduce (Open MPI + mpi4py in the example
image) across the two nodes, a torchrun-contract allreduce with one GPU per replica, GPUs
split between two replicas on one node, and a failing replica failing the whole gang.

Both slurmd run on this machine (``NodeHostname=localhost``), so "across two nodes" means
two Slurm nodes, two tasks and two containers on the host network, not two machines. The
GPUs are FAKE (mknod'd device nodes): placement and isolation, not CUDA."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from demo.images import MPI_IMAGE
from demo.slurm.cluster import FakeNode, LocalSlurm

from tests.integration.hfkit import Hetflow, step_out, write
from tests.integration.slurm_fixture import local_cluster, slurm_config

NODES = (FakeNode("hf-g0", "a100:2", features=("gpu2",)), FakeNode("hf-g1", "a100:2", features=("gpu2",)))

CLUSTER = """apiVersion: hetflow/v1
kind: Cluster
name: slurm-gang
bandwidth: 10Gbit/s
nodeTypes:
  - {name: gpu2, count: 2, cores: 2, memory: 3Gi, price: 4.0,
     gpus: {model: NVIDIA A100-SXM4-40GB, count: 2, memory: 40Gi, computeCapability: "8.0"}}
"""

# what each replica saw: its rank's contract, its node, and its GPU device nodes
SHOW = (
    'echo "rank=$HETFLOW_RANK world=$HETFLOW_WORLD_SIZE node_rank=$HETFLOW_NODE_RANK '
    "local_rank=$LOCAL_RANK local_world=$LOCAL_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT "
    "cuda=$CUDA_VISIBLE_DEVICES slurm_gpus=$HETFLOW_SLURM_GPUS job=$HETFLOW_SLURM_JOB node=$HETFLOW_NODE "
    'devs=$(ls /dev | grep -E "^nvidia[0-9]+$" | tr "\\n" ,)"'
)

GANGS = f"""apiVersion: hetflow/v1
name: slurm-gangs
steps:
  mpi:
    image: {MPI_IMAGE}
    command: [python3, /app/gang/allreduce.py]
    resources: {{cpus: 1, memory: 256Mi}}
    estimate: 10s
    gang: {{replicas: 2, per_node: 1, launcher: mpi, port: 29510}}
  torch:
    image: {MPI_IMAGE}
    command: [sh, -c, '{SHOW}; python3 /app/gang/torch_allreduce.py && echo $RANK > /out/rank.txt']
    resources: {{cpus: 1, memory: 256Mi, gpus: 1}}
    outputs: [rank.txt]
    estimate: 10s
    gang: {{replicas: 2, per_node: 1, launcher: torch, port: 29520}}
"""

PACKED = f"""apiVersion: hetflow/v1
name: slurm-packed
steps:
  packed:
    image: {MPI_IMAGE}
    command: [sh, -c, '{SHOW}; python3 /app/gang/torch_allreduce.py']
    resources: {{cpus: 1, memory: 256Mi, gpus: 1}}
    estimate: 10s
    gang: {{replicas: 2, per_node: 2, launcher: torch, port: 29530}}
"""

FAILING = f"""apiVersion: hetflow/v1
name: slurm-gang-fails
steps:
  flaky:
    image: {MPI_IMAGE}
    # replica 1 fails at once; replica 0 would run for 10 minutes unless the gang stops it
    command: [sh, -c, 'echo "attempt $HETFLOW_ATTEMPT rank $HETFLOW_RANK";
      [ "$HETFLOW_RANK" = 1 ] && exit 3; sleep 600']
    resources: {{cpus: 1, memory: 128Mi}}
    retries: 1
    estimate: 5s
    gang: {{replicas: 2, per_node: 1, launcher: none}}
"""


@pytest.fixture(scope="module")
def gang_cluster() -> Iterator[LocalSlurm]:
    with local_cluster(NODES, prefix="hfgang-") as cluster:
        yield cluster


def _config(tmp_path: Path, cluster: LocalSlurm) -> str:
    return slurm_config(tmp_path, cluster, CLUSTER, use_features=True, stop_timeout=3)


def _seen(text: str) -> dict[int, dict[str, str]]:
    """Each replica's SHOW line by rank."""
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        body = line.split(" | ", 1)[-1].split("]: ", 1)[-1]  # `hetflow logs` prefixes a gang's lines [rankN]:
        if body.startswith("rank=") and "world=" in body:
            fields = dict(f.split("=", 1) for f in body.split() if "=" in f)
            out[int(fields["rank"])] = fields
    return out


def test_mpi_and_torch_gangs_span_two_slurm_nodes(
    hf: Hetflow, tmp_path: Path, gang_cluster: LocalSlurm, mpi_image: str
) -> None:
    hf("run", "-q", "--config", _config(tmp_path, gang_cluster), write(tmp_path, GANGS), timeout=400)
    rid = hf.last_run()
    data = hf.show(rid)
    steps = {s["step"]: s for s in data["steps"]}
    assert {(n, s["state"], s["attempts"]) for n, s in steps.items()} == {
        ("mpi", "succeeded", 1),
        ("torch", "succeeded", 1),
    }, data
    # mpi: replica 0's mpirun ran one rank in each container, on each Slurm node
    mpi_log = hf("logs", rid, "mpi").stdout
    ok = sorted(line.split(" | ", 1)[-1] for line in mpi_log.splitlines() if "allreduce sum = 3" in line)
    assert len(ok) == 2 and all(line.endswith("ok") for line in ok), mpi_log

    # torch: every replica got the contract, one GPU of its own node, and the sum
    seen = _seen(hf("logs", rid, "torch").stdout) | _seen(hf("logs", rid, "torch", "--rank", "1").stdout)
    assert sorted(seen) == [0, 1], seen
    assert {s["node_rank"] for s in seen.values()} == {"0", "1"}  # two nodes
    assert sorted(s["node"] for s in seen.values()) == ["hf-g0", "hf-g1"]
    for s in seen.values():
        assert (s["world"], s["local_rank"], s["local_world"], s["cuda"]) == ("2", "0", "1", "0")
        assert s["master"].endswith(":29520")  # MASTER_PORT
        assert len(s["devs"].strip(",").split(",")) == 1  # exactly one (fake) GPU device node
    assert seen[0]["master"] == seen[1]["master"]  # rank 0's node address (its NodeAddr)
    assert seen[0]["job"] == seen[1]["job"] != ""  # one Slurm job
    assert (step_out(hf, rid, "torch") / "rank.txt").read_text().strip() == "0"
    for rank in (0, 1):
        assert "allreduce sum = 3 (expected 3) ok" in hf("logs", rid, "torch", "--rank", str(rank)).stdout
    # each gang's rank 0 container was measured by its task on the node, as locally
    for row in json.loads(hf("trace", rid, "--json").stdout):
        assert row["peak_rss"] > 1 << 20 and row["cpu_time"] > 0, row


def test_replicas_on_one_node_split_its_gpus(
    hf: Hetflow, tmp_path: Path, gang_cluster: LocalSlurm, mpi_image: str
) -> None:
    hf("run", "-q", "--config", _config(tmp_path, gang_cluster), write(tmp_path, PACKED), timeout=300)
    rid = hf.last_run()
    assert hf.show(rid)["state"] == "succeeded"
    seen = _seen(hf("logs", rid, "packed").stdout) | _seen(hf("logs", rid, "packed", "--rank", "1").stdout)
    assert sorted(seen) == [0, 1], seen
    assert {s["node_rank"] for s in seen.values()} == {"0"}  # per_node: 2 packs them on one node
    assert {s["local_rank"] for s in seen.values()} == {"0", "1"}
    assert {s["local_world"] for s in seen.values()} == {"2"}
    # the node's two GPUs, one each (gres indices), each seen inside as GPU 0
    assert sorted(s["slurm_gpus"] for s in seen.values()) == ["0", "1"], seen
    assert seen[0]["devs"] != seen[1]["devs"]


def test_a_failing_replica_fails_and_reruns_the_whole_gang(
    hf: Hetflow, tmp_path: Path, gang_cluster: LocalSlurm, mpi_image: str
) -> None:
    proc = hf(
        "run", "-q", "--config", _config(tmp_path, gang_cluster), write(tmp_path, FAILING), check=False, timeout=300
    )
    assert proc.returncode != 0
    rid = hf.last_run()
    step = hf.show(rid)["steps"][0]
    assert (step["state"], step["attempts"]) == ("failed", 2), step  # retried once, whole
    attempts = json.loads(hf("trace", rid, "--json").stdout)
    assert [a["exit"] for a in attempts] == [3, 3], attempts  # replica 1's own code, not 137
    # both attempts ran both replicas; replica 0 was stopped, not waited for: its 600 s sleep
    # is longer than the run's whole timeout above (an event, not a wall-clock threshold)
    assert all(a["duration"] < 600 for a in attempts), attempts
    log = hf("logs", rid, "flaky", "--rank", "1").stdout
    assert "rank 1" in log


SLOW = f"""apiVersion: hetflow/v1
name: slurm-gang-slow
steps:
  slow:
    image: {MPI_IMAGE}
    command: [sh, -c, 'echo "rank $HETFLOW_RANK up"; sleep {{{{ params.sleep }}}}; echo "rank $HETFLOW_RANK done"']
    resources: {{cpus: 1, memory: 128Mi}}
    estimate: 5s
    gang: {{replicas: 2, per_node: 1, launcher: none}}
params: {{sleep: 60}}
"""


def _replicas(rid: str) -> list[str]:
    out = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"name=hf-{rid}-", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(out.stdout.split())


def _both_up(hf: Hetflow, rid: str) -> bool:
    return len(_replicas(rid)) == 2 and all("up" in hf("logs", rid, "slow", "--rank", str(r)).stdout for r in (0, 1))


def test_stop_ends_every_replica_of_a_running_gang(
    hf: Hetflow, tmp_path: Path, gang_cluster: LocalSlurm, mpi_image: str
) -> None:
    config = _config(tmp_path, gang_cluster)
    rid = hf("run", "--detach", "--config", config, write(tmp_path, SLOW)).stdout.strip()
    hf.wait_for(lambda: _both_up(hf, rid), timeout=120)
    assert f"run {rid} stopped" in hf("stop", rid).stdout
    assert hf.show(rid)["steps"][0]["state"] == "stopped"
    hf.wait_for(lambda: _replicas(rid) == [], timeout=60)  # scancel reached both tasks' containers


def test_a_gang_survives_its_executor_and_is_adopted_whole(
    hf: Hetflow, tmp_path: Path, gang_cluster: LocalSlurm, mpi_image: str
) -> None:
    config = _config(tmp_path, gang_cluster)
    rid = hf("run", "--detach", "--config", config, write(tmp_path, SLOW), "-p", "sleep=8").stdout.strip()
    hf.wait_for(lambda: _both_up(hf, rid), timeout=120)
    os.kill(hf.show(rid)["pid"], signal.SIGKILL)  # Slurm keeps the job: both replicas go on
    hf("resume", "-q", rid, timeout=300)
    data = hf.show(rid)
    assert (data["state"], data["steps"][0]["attempts"]) == ("succeeded", 1)  # adopted, not started again
    for rank in (0, 1):
        assert f"rank {rank} done" in hf("logs", rid, "slow", "--rank", str(rank)).stdout


BUSY = f"""apiVersion: hetflow/v1
name: slurm-gangs-queue
steps:
  first:
    image: {MPI_IMAGE}
    command: [sleep, "60"]
    resources: {{cpus: 2, memory: 128Mi}}
    estimate: 60s
    gang: {{replicas: 2, per_node: 1}}
  second:
    image: {MPI_IMAGE}
    command: [sleep, "60"]
    resources: {{cpus: 2, memory: 128Mi}}
    estimate: 60s
    gang: {{replicas: 2, per_node: 1}}
"""


def test_a_gang_waiting_for_its_nodes_says_so_and_starts_nothing(
    hf: Hetflow, tmp_path: Path, gang_cluster: LocalSlurm, mpi_image: str
) -> None:
    # each gang takes every CPU of both nodes: Slurm runs one and holds the other whole
    config = _config(tmp_path, gang_cluster)
    rid = hf("run", "--detach", "--config", config, write(tmp_path, BUSY)).stdout.strip()

    def one_waits() -> bool:
        steps = {s["step"]: s for s in hf.show(rid)["steps"]}
        return any(s["state"] == "running" and "pending: Resources" in (s["reason"] or "") for s in steps.values())

    hf.wait_for(one_waits, timeout=120)
    steps = {s["step"]: s for s in hf.show(rid)["steps"]}
    waiting = next(n for n, s in steps.items() if "pending: Resources" in (s["reason"] or ""))
    assert not [c for c in _replicas(rid) if f"-{waiting}-" in c]  # no replica of it started
    hf("stop", rid)
    hf.wait_for(lambda: _replicas(rid) == [], timeout=60)
