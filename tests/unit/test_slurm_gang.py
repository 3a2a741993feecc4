"""A gang step on Slurm, the pure parts: the allocation sbatch is asked for, the scripts
(valid bash, one case arm per replica with its own name, log and command), the rule that
folds the replicas' exit codes, the MPI host placeholders, and the replica templates the
launcher hands a cluster engine (host network, no GPUs, no contract yet)."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm import SlurmSettings, sbatch_args
from hetflow.execute.backends.slurm.gang import FOLD, failed_replica, gang_scripts
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.execute.gang.mpilaunch import (
    MPI_MOUNT,
    MpiError,
    MpiPeer,
    placeholder_host,
    resolve_hosts,
    ssh_config_text,
)
from hetflow.execute.gang.replicas import gang_state
from hetflow.plan.instance import MachineClass, Placement
from hetflow.spec import Gang, GpuRequest
from tests.unit.builders import Outcome, world
from tests.unit.test_runner_cluster import QueueBackend, cluster_runner


def _job(gang: Gang, *, gpus: int = 0, cpus: float = 1.5, memory: int = 3 << 30, nodes: int = 1) -> Job:
    ranks = tuple(
        ContainerSpec(
            name="hf-r1-train-1" if i == 0 else f"hf-r1-train-1-r{i}",
            image="img",
            command=("python3", "/app/x.py", "it's"),
            user="1000:1000",
            labels={},
            env={"A": "1"},
            mounts=(Mount("/w/mpi", MPI_MOUNT), Mount(f"/w/out{i}", "/out", read_only=False)),
            network_name="host",
            log_path=f"/w/logs/train.1{'' if i == 0 else f'.rank{i}'}.log",
        )
        for i in range(gang.replicas)
    )
    return Job(
        name="hf-r1-train-1",
        run_id="r1",
        step="train",
        attempt=1,
        container=ranks[0],
        cpus=cpus,
        memory=memory,
        gpus=gpus,
        gpu_model="NVIDIA A100-SXM4-40GB" if gpus else None,
        node_class="gpu2",
        ranks=ranks,
        gang=gang,
        nodes=nodes,
    )


def test_a_gang_is_one_allocation_of_n_tasks() -> None:
    args = sbatch_args(_job(Gang(replicas=4, per_node=2), gpus=2, nodes=2), SlurmSettings(), [], Path("/j"))
    assert "--nodes=2" in args and "--ntasks=4" in args and "--ntasks-per-node=2" in args
    assert "--cpus-per-task=2" in args  # 1.5 CPUs rounded up, per task
    assert "--mem-per-cpu=1536M" in args  # 3 GiB per replica over its 2 CPUs: --mem is per node
    assert "--gpus-per-task=a100:2" in args  # the plan's model as the gres type
    assert not [a for a in args if a.startswith(("--mem=", "--gres=", "--ntasks=1"))]


def test_a_gang_without_per_node_lets_slurm_pack_but_takes_the_plans_node_count() -> None:
    args = sbatch_args(_job(Gang(replicas=3), nodes=1), SlurmSettings(), [], Path("/j"))
    assert "--nodes=1" in args and "--ntasks=3" in args
    assert not [a for a in args if a.startswith(("--ntasks-per-node", "--gpus-per-task"))]
    # per_node decides the fewest nodes even when the plan said fewer
    args = sbatch_args(_job(Gang(replicas=4, per_node=1), nodes=1), SlurmSettings(), [], Path("/j"))
    assert "--nodes=4" in args


def test_a_single_step_keeps_its_one_task_allocation() -> None:
    job = _job(Gang(replicas=2), gpus=1)
    single = Job(job.name, job.run_id, job.step, 1, job.container, 1, 1 << 30, gpus=1, gpu_model=job.gpu_model)
    args = sbatch_args(single, SlurmSettings(), [], Path("/j"))
    assert "--nodes=1" in args and "--ntasks=1" in args and "--gres=gpu:a100:1" in args


@pytest.mark.parametrize(
    ("codes", "lead", "want"),
    [
        ({0: 0, 1: 0}, False, 0),
        ({0: 137, 1: 3}, False, 3),  # replica 1 failed; replica 0 was stopped for it
        ({0: 143, 1: 137}, False, 143),  # only stopped replicas: scancel
        ({0: 0}, False, 137),  # a replica that left no code counts as killed
        ({0: 0, 1: 143}, True, 0),  # mpi: the launcher decides, workers are stopped after it
        ({0: 2, 1: 0}, True, 2),
        ({1: 0}, True, 137),
    ],
)
def test_the_gangs_exit_code(tmp_path: Path, codes: dict[int, int], lead: bool, want: int) -> None:
    """The batch step's shell fold over the replicas' exit files, run by bash, gives what the
    local backend's ``gang_state`` gives for the same replicas."""
    for rank, code in codes.items():
        (tmp_path / f"job.r{rank}.exit").write_text(f"{code} node\n")
    script = f"name=job; jobdir={tmp_path}; world=2; lead={int(lead)}\n{FOLD}echo $code\n"
    got = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    folded = gang_state({r: (False, c, "exited") for r, c in codes.items()}, 2, lead=lead).exit_code
    assert int(got) == folded == want


@pytest.mark.parametrize(
    ("codes", "want"),
    [
        ({0: 137, 1: 5}, "replica 1 failed (replica 1 exited 5)"),  # the backend contract's failing replica
        ({0: 0, 1: 0}, ""),
        ({}, ""),  # no gang: a single job leaves no replica codes
    ],
    ids=["replica-1-failed", "none-failed", "no-gang"],
)
def test_a_failed_gang_says_which_replica_failed_it(tmp_path: Path, codes: dict[int, int], want: str) -> None:
    """On the code before, a Slurm gang whose replica 1 exited 5 ended with no reason (the
    backend contract's gang part found it; the other backends name the replica)."""
    for rank, code in codes.items():
        (tmp_path / f"job.r{rank}.exit").write_text(f"{code} node\n")
    (tmp_path / "job.exit").write_text("5 77\n")
    assert failed_replica(tmp_path, "job") == want


def test_the_scripts_are_bash_with_one_arm_per_replica(tmp_path: Path) -> None:
    job = _job(Gang(replicas=3, launcher="mpi", port=29600), gpus=1)
    settings = SlurmSettings(device_dir="/devs/{node}", gres_files={"n1": ("/dev/nvidia3",)})
    batch, task = gang_scripts(job, settings, Path("/j/r1"), "/c.conf", "/hooks")
    for name, text in (("batch", batch), ("task", task)):
        path = tmp_path / name
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, text
    assert "srun --ntasks=3 --cpus-per-task=2" in batch and "lead=1" in batch
    for i, spec in enumerate(job.ranks):
        assert f"  {i}) cname={spec.name};" in task
        assert f"log={spec.log_path}" in task
    assert "'it'\"'\"'s'" in task  # the command is quoted for the shell
    assert "--network host" in task and "--hostname" not in task
    assert "per=1; launcher=mpi; port=29600; mpi_dir=/w/mpi" in task
    assert "n1) files=(/dev/nvidia3) ;;" in task and 'devdir=/devs/"$node"' in task
    # each replica's env is read from its own file beside the scripts, never written in them
    assert "A=1" not in task and "--env A" not in task
    for i in range(3):
        assert f"--env-file /j/r1/hf-r1-train-1.r{i}.env" in task


def test_a_gang_needs_a_container_per_replica() -> None:
    job = _job(Gang(replicas=2))
    bad = Job(job.name, job.run_id, job.step, 1, job.container, 1, 1, ranks=job.ranks[:1], gang=Gang(replicas=2))
    with pytest.raises(Exception, match="1 replica containers for a gang of 2"):
        gang_scripts(bad, SlurmSettings(), Path("/j"), "/c", "/h")


def test_placeholder_hosts_are_filled_once_the_nodes_are_known() -> None:
    peers = [MpiPeer(i, placeholder_host(i), 29500 + i) for i in range(2)]
    text = ssh_config_text(peers)
    assert "HostName hetflow-host-1" in text
    done = resolve_hosts(text, ["10.0.0.5", "node-b"])
    assert "HostName 10.0.0.5" in done and "HostName node-b" in done and "hetflow-host-" not in done
    assert "Port 29501" in done
    with pytest.raises(MpiError, match="only 1 hosts"):
        resolve_hosts(text, ["a"])
    with pytest.raises(MpiError, match="not a host name"):
        resolve_hosts(text, ["a", "b;rm -rf /"])


GANG = """
train:
  image: x
  command: [python3, /app/x.py]
  resources: {cpus: 1, memory: 1Gi, gpus: 1}
  gang: {replicas: 2, per_node: 1, launcher: mpi, port: 29600}
"""


def test_a_cluster_engine_gets_replica_templates_and_the_plans_nodes(tmp_path: Path) -> None:
    w = world(tmp_path, GANG, outcomes={"train": [Outcome()]})
    backend = QueueBackend(w.engine)
    placed = Placement(
        "train", "default", "gpu2-0", "gpu2", 0.0, 1.0, 1.0, 1 << 30, (0,), ranks=(("gpu2-0", (0,)), ("gpu2-1", (0,)))
    )
    classes = (MachineClass("gpu2", 2, 8, 32 << 30, gpus=2, gpu_model="NVIDIA A100-SXM4-40GB"),)
    assert cluster_runner(w, backend, {"train": placed}, classes).execute() == "succeeded"
    (job,) = backend.jobs.values()
    assert job.gang is not None and job.nodes == 2 and job.gpus == 1 and job.node_class == "gpu2"
    assert [r.name for r in job.ranks] == [job.name, f"{job.name}-r1"]
    for i, r in enumerate(job.ranks):
        assert r.network_name == "host" and not r.devices and "HETFLOW_RANK" not in r.env  # the backend adds them
        assert r.env["HETFLOW_MPI_RANK"] == str(i)
        assert [m.target for m in r.mounts].count(MPI_MOUNT) == 1
    assert job.ranks[0].command[:2] == ("/bin/sh", "-c") and "mpirun" in job.ranks[0].command[2]
    assert "-x HETFLOW_WORLD_SIZE" in job.ranks[0].command[2] and "-x CUDA_VISIBLE_DEVICES" in job.ranks[0].command[2]
    assert "29601" in job.ranks[1].command  # its sshd: port + rank
    mpi_dir = next(m.source for m in job.ranks[0].mounts if m.target == MPI_MOUNT)
    config = (Path(mpi_dir) / "ssh_config").read_text()
    assert "HostName hetflow-host-0" in config and "Port 29601" in config
    outs = {next(m.source for m in r.mounts if m.target == "/out") for r in job.ranks}
    assert len(outs) == 2  # rank 1 writes scratch, not the step's /out


@pytest.mark.parametrize(
    ("vendor", "model", "nodes", "control", "variable"),
    [
        ("amd", "AMD Instinct MI250X", "dri/renderD", "kfd", "ROCR_VISIBLE_DEVICES"),
        ("intel", "Intel Data Center GPU Max 1550", "dri/renderD", "none", "ZE_AFFINITY_MASK"),
        ("nvidia", "NVIDIA A100-SXM4-40GB", "nvidia", "nvidiactl nvidia-uvm nvidia-uvm-tools", "CUDA_VISIBLE_DEVICES"),
    ],
    ids=["amd", "intel", "nvidia"],
)
def test_a_gangs_replicas_get_their_vendors_device_nodes(
    vendor: str, model: str, nodes: str, control: str, variable: str
) -> None:
    # as a single step's script does (devices.gpu_devices): before, every gang got NVIDIA's
    job = replace(_job(Gang(replicas=2), gpus=1), gpu_model=model, gpu_request=GpuRequest(count=1, vendor=vendor))
    _, task = gang_scripts(job, SlurmSettings(), Path("/j/r1"), "/c.conf", "/hooks")
    assert f'files+=("$devdir/{nodes}$m")' in task and f'--env "{variable}=$inside"' in task
    assert f"for c in {control}; do" in task
