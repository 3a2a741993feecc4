"""The local Slurm test cluster's fake nodes (demo/slurm/cluster.py) and the configuration that
describes them: slurm.conf with a node line and gres per fake node, gres.conf naming each fake
GPU's device node (whole GPUs, AMD or Intel render nodes, MIG instances, shards, MPS)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetflow.execute.devices.migtable import MigInstance
from hetflow.execute.devices.migtable import mig_instances as mig_instances_of
from hetflow.inventory.fakes.gpus import make_fake_gpus, parse_fake_entries

PARTITION = "hf"


@dataclass(frozen=True)
class FakeNode:
    name: str
    gpus: str = ""  # HETFLOW_FAKE_GPUS syntax: "a100:2", "t4:1,l4:1"
    cpus: int = 2
    memory_mb: int = 4000
    features: tuple[str, ...] = ()
    # Sharing gres on every NVIDIA GPU of the node (gres.conf Count= per File=): ``shards``
    # per GPU (gres/shard: time-slicing) or ``mps`` per GPU (gres/mps: 100 by Slurm's convention).
    shards: int = 0
    mps: int = 0
    # AMD or Intel GPUs, as their DRM render nodes: "mi250x:2" with ``drm_vendor`` amd (then
    # BASE/dev/NODE/kfd too) or intel; gres type from the model, File= .../dri/renderD128...
    drm: str = ""
    drm_vendor: str = ""


# cgroup.conf(5) of a cluster started with ``cgroups``: each job's memory limit in its cgroup
# (cgroup v1, as this machine has; no swap limit: a machine without swap needs none) and
# devices left alone (the fake GPUs reach containers through podman's own device rules).
CGROUP_CONF = "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainCores=no\nConstrainDevices=no\n"


def slurm_conf(base: Path, nodes: Sequence[FakeNode], ports: Mapping[str, int], *, cgroups: bool = False) -> str:
    """slurm.conf(5) for the cluster: cons_tres with gpu gres, no accounting; no cgroups, or
    (``cgroups``) proctrack/cgroup and task/cgroup, so a job's memory limit and scancel hold
    every process in its cgroup: the step's container too (its cgroup parent is the job's)."""
    lines = [
        "ClusterName=hetflow",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ports['slurmctld']}",
        f"AuthType=auth/munge\nAuthInfo=socket={base / 'munge' / 'munge.socket'}\nCredType=cred/munge",
        "SlurmUser=root\nSlurmdUser=root",
        f"StateSaveLocation={base / 'state'}",
        f"SlurmdSpoolDir={base / 'spool' / '%n'}",
        f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={base / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={base / 'log' / 'slurmd-%n.log'}",
        # no cgroups by default: processes tracked through /proc, no task binding
        "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
        if cgroups
        else "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none",
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nGresTypes=gpu,shard,mps",
        "MpiDefault=none\nJobAcctGatherType=jobacct_gather/none",
        # No slurmdbd: sacct cannot answer; a human-readable record of ended jobs goes here.
        "AccountingStorageType=accounting_storage/none",
        f"JobCompType=jobcomp/filetxt\nJobCompLoc={base / 'log' / 'jobcomp.txt'}",
        # Ended jobs stay in squeue for 10 minutes; the backend's exit files outlive that.
        "MinJobAge=600",
        "KillWait=30",
        # Dependent jobs start on the main scheduler's pass: every second, not every minute.
        "SchedulerParameters=sched_interval=1",
        "ReturnToService=2",
        # Trust the node lines whatever the machine has (CI runners differ in cores).
        "SlurmdParameters=config_overrides",
        "DefMemPerCPU=100",
    ]
    for n in nodes:
        types = _gpu_types(n) + _drm_types(n) + _mig_types(n)
        nvidia = sum(count for _, count in _gpu_types(n))
        shared = nvidia + sum(count for _, count in _drm_types(n))  # shards: on any vendor's GPU
        gres = ",".join(
            [f"gpu:{model}:{count}" for model, count in types]
            + ([f"shard:{n.shards * shared}"] if n.shards and shared else [])
            + ([f"mps:{n.mps * nvidia}"] if n.mps and nvidia else [])
        )
        lines.append(
            f"NodeName={n.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[n.name]} "
            f"CPUs={n.cpus} RealMemory={n.memory_mb}"
            + (f" Gres={gres}" if gres else "")
            + (f" Feature={','.join(n.features)}" if n.features else "")
            + " State=UNKNOWN"
        )
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(base: Path, nodes: Sequence[FakeNode]) -> str:
    """gres.conf(5): each node's fake device nodes, one line per GPU type, in index order."""
    lines = []
    for n in nodes:
        index = 0
        for model, count in _gpu_types(n):
            # one folder per File= (slurmd splits the path at its last "/"), a hostlist range
            last = index + count - 1
            files = base / "dev" / n.name / (f"nvidia{index}" if count == 1 else f"nvidia[{index}-{last}]")
            lines.append(f"NodeName={n.name} Name=gpu Type={model} File={files}")
            index += count
        # a shared GPU: Count= shard / mps gres on each GPU's own File= (gres.conf(5))
        for gpu in range(index):
            for name, count in (("shard", n.shards), ("mps", n.mps)):
                if count:
                    gpu_file = base / "dev" / n.name / f"nvidia{gpu}"
                    lines.append(f"NodeName={n.name} Name={name} Count={count} File={gpu_file}")
        minor = 128
        for model, count in _drm_types(n):
            dri = base / "dev" / n.name / "dri"
            files = dri / (f"renderD{minor}" if count == 1 else f"renderD[{minor}-{minor + count - 1}]")
            lines.append(f"NodeName={n.name} Name=gpu Type={model} File={files}")
            minor += count
        for k in range(minor - 128):  # an AMD or Intel GPU shared by time-slicing: shards on its render node
            if n.shards:
                render = base / "dev" / n.name / "dri" / f"renderD{128 + k}"
                lines.append(f"NodeName={n.name} Name=shard Count={n.shards} File={render}")
        # a GPU in MIG mode: one record per instance, its GPU's node and its two nvidia-caps
        # nodes (gres.conf(5) MultipleFiles), typed by profile as AutoDetect=nvml names them
        for m in mig_instances(base, n):
            lines.append(f"NodeName={n.name} Name=gpu Type={m.profile} MultipleFiles={','.join(m.files)}")
    return "\n".join(lines) + "\n"


def _drm_types(node: FakeNode) -> list[tuple[str, int]]:
    """The node's AMD or Intel (gres type, count): its ``drm`` spec."""
    return [(model, int(count)) for model, _, count in (p.partition(":") for p in node.drm.split(",") if p)]


def make_drm_gpus(node: FakeNode, folder: Path) -> None:
    """Fake AMD/Intel GPUs: DRM render nodes (char 226, minors 128...) under ``folder/dri``
    and, for AMD, ``folder/kfd`` (mknod'd; no driver behind them)."""
    dri = folder / "dri"
    dri.mkdir(parents=True, exist_ok=True)
    total = sum(count for _, count in _drm_types(node))
    for i in range(total):
        path = dri / f"renderD{128 + i}"
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(226, 128 + i))
    if node.drm_vendor == "amd" and not (folder / "kfd").exists():
        os.mknod(folder / "kfd", 0o666 | stat.S_IFCHR, os.makedev(238, 0))


def mig_instances(base: Path, node: FakeNode) -> tuple[MigInstance, ...]:
    """The node's fake MIG instances (made under ``base/dev/NODE`` if missing), in gres
    order: after the node's whole GPUs."""
    if "mig=" not in node.gpus:
        return ()
    gpus, _ = make_fake_gpus(node.gpus, base / "dev" / node.name)
    return mig_instances_of(gpus, first_index=sum(count for _, count in _gpu_types(node)))


def _mig_types(node: FakeNode) -> list[tuple[str, int]]:
    """The node's MIG gres (profile, count), in layout order."""
    counts: dict[str, int] = {}
    for e in parse_fake_entries(node.gpus):
        for profile in e.mig * e.count:
            counts[profile] = counts.get(profile, 0) + 1
    return list(counts.items())


def _gpu_types(node: FakeNode) -> list[tuple[str, int]]:
    """The node's whole-GPU (gres type, count) in device order (a GPU in MIG mode is its
    instances: ``_mig_types``); neighbours of one type merge."""
    out: list[tuple[str, int]] = []
    for model, count in ((e.model, e.count) for e in parse_fake_entries(node.gpus) if not e.mig):
        if out and out[-1][0] == model:
            out[-1] = (model, out[-1][1] + count)
        else:
            out.append((model, count))
    return out
