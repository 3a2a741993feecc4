"""The device nodes and variables a container gets per GPU vendor (AMD, Intel) and the
pieces NVIDIA's shared modes add (MPS limits and pipe directory); ``execute.devices.gpu`` puts
them together.

How each vendor's runtime finds its devices, and so what a container must be given:

- AMD (ROCm): ``/dev/kfd`` (the compute interface shared by all GPUs) plus the GPU's own
  DRM nodes (``/dev/dri/renderD<N>``, and its ``card<N>``), as ROCm's docker guide
  restricts a container to a subset of GPUs.  ROCr enumerates only the GPUs whose render
  node it can open, so inside the container they are numbered 0..n-1 in host order; we
  set ``ROCR_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` to those indexes (not UUIDs:
  an index list means the same to every ROCm version, and HIP's variable takes only
  indexes).  No NVIDIA control node; ``NVIDIA_VISIBLE_DEVICES=void``.
- Intel (Level Zero): only the GPU's ``/dev/dri`` nodes; ``ZE_AFFINITY_MASK`` 0..n-1 as
  the container numbers them.  ``ONEAPI_DEVICE_SELECTOR`` is left alone: it would also
  hide SYCL's OpenCL backend, which the step may want.
- A host path keeps its place inside (``/dev/dri/renderD128``, ``/dev/kfd``); a fake node
  made under hetflow's home maps to ``/dev/dri/<name>`` (or ``/dev/<name>``).

DRM nodes are usually ``root:render`` (or ``video``) 0660 and the container runs as the
submitter's UID:GID, so it is given the nodes' groups (``--group-add`` with the host GID
of each node that others cannot open), as ROCm's and Intel's guides add ``render`` and
``video``; the group names need not exist in the image.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hetflow.execute.engine import Mount
from hetflow.inventory import Gpu, Node

MPS_PIPE_DEFAULT = "/tmp/nvidia-mps"  # nvidia-cuda-mps-control's default CUDA_MPS_PIPE_DIRECTORY
MIB = 1024**2


@dataclass(frozen=True)
class GpuAccess:
    devices: tuple[tuple[str, str], ...] = ()  # (host path, container path)
    cdi_devices: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    groups: tuple[str, ...] = ()  # supplementary GIDs the container needs to open its nodes


def control_nodes(node: Node, vendor: str) -> list[tuple[str, str]]:
    """The host's control nodes a ``vendor`` GPU needs, mapped to /dev/<name>: NVIDIA's
    nvidiactl, nvidia-uvm, ... (names starting ``nvidia``), AMD's ``kfd``; Intel none."""
    if vendor == "nvidia":
        picked = [c for c in node.control_devices if os.path.basename(c).startswith("nvidia")]
    elif vendor == "amd":
        picked = [c for c in node.control_devices if os.path.basename(c) == "kfd"]
    else:
        picked = []
    return [(c, f"/dev/{os.path.basename(c)}") for c in picked]


def dri_nodes(gpus: Sequence[Gpu]) -> list[tuple[str, str]]:
    """Each GPU's DRM render and card nodes, mapped to /dev/dri/<name>."""
    return [(p, f"/dev/dri/{os.path.basename(p)}") for g in gpus for p in (g.render_path, g.card_path) if p]


def node_groups(paths: Iterable[str]) -> tuple[str, ...]:
    """The host GIDs of the nodes that their group may open but others may not."""
    found: list[str] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        gid = str(st.st_gid)
        if st.st_gid != 0 and not st.st_mode & stat.S_IROTH and st.st_mode & stat.S_IRGRP and gid not in found:
            found.append(gid)
    return tuple(found)


def _inside(n: int) -> str:
    return ",".join(str(i) for i in range(n))


def amd_access(gpus: Sequence[Gpu], node: Node) -> GpuAccess:
    devices = control_nodes(node, "amd") + dri_nodes(gpus)
    env = {
        "ROCR_VISIBLE_DEVICES": _inside(len(gpus)),
        "HIP_VISIBLE_DEVICES": _inside(len(gpus)),
        "HETFLOW_GPU_UUIDS": ",".join(g.uuid for g in gpus),
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    return GpuAccess(devices=tuple(devices), env=env, groups=node_groups(h for h, _ in devices))


def intel_access(gpus: Sequence[Gpu], node: Node) -> GpuAccess:
    devices = dri_nodes(gpus)
    env = {
        "ZE_AFFINITY_MASK": _inside(len(gpus)),
        "HETFLOW_GPU_UUIDS": ",".join(g.uuid for g in gpus),
        "NVIDIA_VISIBLE_DEVICES": "void",
    }
    return GpuAccess(devices=tuple(devices), env=env, groups=node_groups(h for h, _ in devices))


def merge(parts: Sequence[GpuAccess]) -> GpuAccess:
    """One container's access from several vendors' (a ``gpu_vendor: any`` step given GPUs
    of two vendors); NVIDIA_VISIBLE_DEVICES=void only when no part gives NVIDIA GPUs."""
    env: dict[str, str] = {}
    for p in parts:
        for k, v in p.env.items():
            if k == "NVIDIA_VISIBLE_DEVICES" and v == "void" and k in env:
                continue
            if k == "HETFLOW_GPU_UUIDS" and k in env:
                v = f"{env[k]},{v}"
            env[k] = v
    return GpuAccess(
        devices=tuple(dict.fromkeys(d for p in parts for d in p.devices)),
        cdi_devices=tuple(c for p in parts for c in p.cdi_devices),
        mounts=tuple(dict.fromkeys(m for p in parts for m in p.mounts)),
        env=env,
        groups=tuple(dict.fromkeys(g for p in parts for g in p.groups)),
    )


def mps_memory_limit(gpu: Gpu, share: float, node: Node, memory: int) -> int:
    """Bytes of device memory an MPS client may pin: the step's ``gpu_memory`` when given,
    else the node's ``mps_memory_limit``, else its share of the GPU's memory."""
    if memory:
        return memory
    if node.gpu_sharing.mps_memory_limit is not None:
        return node.gpu_sharing.mps_memory_limit
    return int(gpu.memory_bytes * share)


def mps_env(gpu: Gpu, share: float, node: Node, memory: int, pipe: str) -> dict[str, str]:
    """An MPS client's limits (NVIDIA MPS docs, environment variables): its share of the
    SMs, the memory it may pin on device 0 (the only one it sees), where the daemon's
    pipes are.  CUDA_VISIBLE_DEVICES names the GPU by UUID, as the MPS docs advise (the
    server on the host numbers devices its own way)."""
    limit = mps_memory_limit(gpu, share, node, memory)
    return {
        "CUDA_VISIBLE_DEVICES": gpu.uuid,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, round(share * 100))),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={max(1, limit // MIB)}M",
        "CUDA_MPS_PIPE_DIRECTORY": pipe,
    }


def mps_pipe(env: Mapping[str, str] | None = None) -> str:
    """The host's MPS pipe directory: hetflow's own setting, the host's
    CUDA_MPS_PIPE_DIRECTORY, or the daemon's default."""
    env = os.environ if env is None else env
    return env.get("HETFLOW_MPS_PIPE_DIRECTORY") or env.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_PIPE_DEFAULT
