"""A step's accelerator request in Slurm's gres terms (pure functions, for tests).

- whole GPUs: ``--gres=gpu:<type>:N`` (type from the GPU model: ``a100``, ``mi250x``,
  ``max1550``), or ``--gpus=N`` when the model has no gres type;
- a share of one GPU on a time-slicing node: ``--gres=shard:N``, N = ceil(share x shards per
  GPU), the shards per GPU being the class's ``replicas`` (gres.conf ``Name=shard Count=``
  on each GPU's ``File=``) or ``SlurmSettings.shards_per_gpu``;
- a share on an MPS node: ``--gres=mps:P``, P = ceil(share x 100): Slurm's convention of
  100 mps per GPU (gres.conf ``Name=mps Count=100``), a percentage of the GPU;
- a MIG instance: ``--gres=gpu:<profile>:1``; Slurm's ``AutoDetect=nvml`` names MIG gres
  types by profile (``gpu:1g.10gb``), and gres types match by substring, so the profile
  works where the type is ``a100_1g.10gb`` too (``gres_types`` can map it otherwise).

Slurm sets no useful CUDA_MPS_ACTIVE_THREAD_PERCENTAGE itself (22.05 sets it from the
node's total): the job script gives the container the share's (``mps_env``).
"""

from __future__ import annotations

import math

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm.settings import SlurmSettings, gres_type

MPS_PER_GPU = 100  # Slurm's convention: gres/mps Count=100 per GPU, a percentage


def share_gres_kind(job: Job, settings: SlurmSettings) -> str:
    """``shard`` or ``mps``: the planned class's sharing mode, else the settings'."""
    sharing = job.gpu_sharing
    if sharing is not None and sharing.shared:
        return "mps" if sharing.mode == "mps" else "shard"
    return settings.share_gres


def gres_args(job: Job, settings: SlurmSettings) -> list[str]:
    """sbatch's GPU options for a single-container job; [] for a CPU job."""
    req = job.gpu_request
    if req is None or req.kind == "whole":
        count = req.count if req is not None else job.gpus
        if not count:
            return []
        kind = gres_type(job.gpu_model, settings.gres_types)
        return [f"--gres=gpu:{kind}:{count}" if kind else f"--gpus={count}"]
    if req.kind == "mig":
        profile = req.mig or ""
        kind = gres_type(profile, settings.gres_types) or profile
        return [f"--gres=gpu:{kind}:1"]
    if req.kind == "share":
        share = float(req.share or 0.0)
        if share_gres_kind(job, settings) == "mps":
            return [f"--gres=mps:{mps_count(share)}"]
        per_gpu = job.gpu_sharing.replicas if job.gpu_sharing is not None and job.gpu_sharing.shared else 0
        return [f"--gres=shard:{shard_count(share, per_gpu or settings.shards_per_gpu)}"]
    return []


def shard_count(share: float, per_gpu: int) -> int:
    """Shards for ``share`` of a GPU split into ``per_gpu`` shards: at least one, at most all."""
    if per_gpu < 1:
        raise EngineError(f"slurm.shards_per_gpu is {per_gpu}; give the shards per GPU of gres.conf (Count=)")
    return min(per_gpu, max(1, math.ceil(round(share * per_gpu, 9))))


def mps_count(share: float) -> int:
    """gres/mps for ``share`` of a GPU: its percentage, rounded up (1..100)."""
    return min(MPS_PER_GPU, max(1, math.ceil(round(share * MPS_PER_GPU, 9))))


def mps_env(job: Job, settings: SlurmSettings) -> dict[str, str]:
    """The MPS client limits a shared step's container gets on an MPS node: its share of
    the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and, where the node sets one, of memory
    (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, for device 0: the one it sees)."""
    req = job.gpu_request
    if req is None or req.kind != "share" or share_gres_kind(job, settings) != "mps":
        return {}
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(mps_count(float(req.share or 0.0)))}
    limit = job.gpu_sharing.mps_memory_limit if job.gpu_sharing is not None else None
    if limit:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={max(1, limit // 2**20)}M"
    return env


def gpu_vendor(job: Job) -> str:
    """Whose device nodes the container gets: nvidia (the default, and ``any``), amd or intel."""
    vendor = job.gpu_request.vendor if job.gpu_request is not None else "nvidia"
    return vendor if vendor in ("amd", "intel") else "nvidia"


def share_env(job: Job, settings: SlurmSettings) -> dict[str, str]:
    """What a share's container is told, as on this machine (``execute/devices/gpu.py``): its
    share in HETFLOW_GPU_SHARE and, on a time-slicing or MPS class, HETFLOW_GPU_SHARING."""
    req = job.gpu_request
    if req is None or req.kind != "share":
        return {}
    env = {"HETFLOW_GPU_SHARE": f"{float(req.share or 0.0):g}"}
    if gpu_vendor(job) == "nvidia":
        env["HETFLOW_GPU_SHARING"] = "mps" if share_gres_kind(job, settings) == "mps" else "time-slicing"
    return env
