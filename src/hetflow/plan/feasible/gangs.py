"""The run-time model of a gang step, and how many of its replicas one node can hold.

A gang of ``R`` replicas runs its compute (the option's ``runtime``: the step's estimate
scaled to the class, as any step's) and exchanges data: ``comm_bytes`` per replica over the
run (``gang.comm`` in the workflow; gradients times steps for data-parallel training).  The
exchange is modelled as a ring allreduce, which sends ``2 (R - 1) / R x comm_bytes`` through
each replica's slowest link (Patarasuk and Yuan 2009; what NCCL and Horovod do for large
messages), so

    run time = runtime + 2 (R - 1) / R x comm_bytes / bandwidth

with the bandwidth of the slowest link the ring crosses:
- every replica on one node, all the gang's GPUs in one NVLink domain: ``NVLINK_BW``;
- one node otherwise (PCIe peer-to-peer, or host memory for CPU replicas): ``PCIE_BW``;
- several nodes: ``RDMA_BW`` when the class has RDMA, else the cluster's network
  ``bandwidth`` (the same figure data transfers between steps use).

The figures are nominal one-direction rates (A100 NVLink 3: 12 links x 25 GB/s; PCIe 4.0
x16; HDR InfiniBand 200 Gb/s), not measurements; a profile of real runs replaces the
runtime, not these.  Compute does not shrink with more replicas here: ``replicas`` is what
the user asked for, and the model only decides where they go.
"""

from __future__ import annotations

import math

from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Task
from hetflow.spec import Gang

NVLINK_BW = 300e9  # bytes/s, one direction, A100 NVLink 3 (NV12)
PCIE_BW = 24e9  # bytes/s, PCIe 4.0 x16 after protocol overhead
RDMA_BW = 25e9  # bytes/s, HDR InfiniBand (200 Gb/s)


def allreduce_bytes(replicas: int, comm_bytes: float) -> float:
    """Bytes through each replica's slowest link in a ring allreduce of ``comm_bytes``."""
    if replicas <= 1 or comm_bytes <= 0:
        return 0.0
    return 2.0 * (replicas - 1) / replicas * comm_bytes


def link_bandwidth(cls: MachineClass, replicas: int, gpus: int, nodes: int, network: float) -> float:
    """Bytes/s of the slowest link a gang's ring crosses on ``nodes`` machines of ``cls``."""
    if nodes > 1:
        return RDMA_BW if cls.rdma else network
    if gpus > 0 and cls.gpu_link == "nvlink" and replicas * gpus <= max(cls.nvlink_gpus, 0):
        return NVLINK_BW
    return PCIE_BW


def comm_time(cls: MachineClass, replicas: int, gpus: int, comm_bytes: float, nodes: int, network: float) -> float:
    """Seconds a gang spends exchanging data when spread over ``nodes`` machines of ``cls``."""
    volume = allreduce_bytes(replicas, comm_bytes)
    if volume <= 0:
        return 0.0
    return volume / link_bandwidth(cls, replicas, gpus, nodes, network)


def fit_per_node(cls: MachineClass, cores: float, memory: int, gpus: int, one_task: bool) -> tuple[int, str]:
    """How many replicas of this demand one empty machine of ``cls`` holds, and the
    resource that limits it ("cores", "memory", "GPUs"; "one task per machine")."""
    if one_task:
        return 1, "one task per machine"
    limits = []
    if cores > 0:
        limits.append((math.floor(cls.cores / cores + 1e-9), "cores"))
    if memory > 0:
        limits.append((cls.memory // memory, "memory"))
    if gpus > 0:
        limits.append((cls.gpus // gpus, "GPUs"))
    if not limits:
        return 1 << 30, ""
    n, what = min(limits)
    return int(n), what


def nodes_needed(replicas: int, per_node: int) -> int:
    return -(-replicas // per_node) if per_node > 0 else 1


def gang_rejections(
    gang: Gang, cls: MachineClass, cores: float, memory: int, gpus: int, one_task: bool
) -> list[tuple[str, str]]:
    """Why no set of ``cls`` nodes can ever hold the gang (code, reason), or nothing."""
    found: list[tuple[str, str]] = []
    if gang.gpu_link == "nvlink":
        if cls.gpu_link != "nvlink":
            found.append(("gang-nvlink", f"gpu_link: nvlink, but the GPUs of {cls.name} are not joined by NVLink"))
        elif gpus > cls.nvlink_gpus:
            found.append(
                (
                    "gang-nvlink",
                    f"gpu_link: nvlink for {gpus} GPUs per replica, but NVLink joins only "
                    f"{cls.nvlink_gpus} GPUs of {cls.name}",
                )
            )
    if gang.network == "rdma" and not cls.rdma:
        found.append(("gang-rdma", f"network: rdma, but {cls.name} nodes have no RDMA device"))
    fit, what = fit_per_node(cls, cores, memory, gpus, one_task)
    if fit <= 0:
        return found  # one replica does not fit: the resource filters say why
    per_node = min(fit, gang.per_node or fit)
    if per_node * cls.count < gang.replicas:
        limit = f"per_node: {gang.per_node}" if gang.per_node and gang.per_node <= fit else f"{what} of one node"
        found.append(
            (
                "gang-size",
                f"{gang.replicas} replicas need {nodes_needed(gang.replicas, per_node)} nodes of {cls.name} "
                f"at {per_node} per node ({limit}), and it has {cls.count}",
            )
        )
    return found


def gang_runtime(instance: Instance, task: Task, option: Option, nodes: int) -> float:
    """A gang's planned run time on ``nodes`` machines of the option's class: compute plus
    its exchange (the option's runtime alone for a step of one container)."""
    if task.replicas <= 1:
        return option.runtime
    cls = instance.machine_class(option.machine_class)
    return option.runtime + comm_time(cls, task.replicas, option.gpus, task.comm_bytes, nodes, instance.bandwidth)


def machine_shares(p: Placement) -> list[Placement]:
    """A placement as what it holds on each machine: itself for one container; for a gang,
    one placement per machine with the demand of the replicas there summed."""
    if not p.ranks:
        return [p]
    return [
        Placement(p.task, p.variant, m, p.machine_class, p.start, p.finish, p.cores * k, p.memory * k, gpus)
        for m, (k, gpus) in p.per_machine().items()
    ]
