"""The GPU model table: what NVML reports for each model hetflow knows by short name
(``a100``, ``t4``, ...).  Real data, used by fake GPUs, the registry's machine profiles
and the Slurm backend's default gres types."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOWN_MODELS", "GpuModel"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuModel:
    """A GPU model as NVML and nvidia-smi describe it."""

    product: str  # what NVML's nvmlDeviceGetName says
    memory_bytes: int  # what nvidia-smi reports as total memory
    compute_capability: str


KNOWN_MODELS: dict[str, GpuModel] = {
    "a10": GpuModel("NVIDIA A10", 23028 * _MIB, "8.6"),
    "a100": GpuModel("NVIDIA A100-SXM4-40GB", 40960 * _MIB, "8.0"),
    "a100-80g": GpuModel("NVIDIA A100-SXM4-80GB", 81920 * _MIB, "8.0"),
    "h100": GpuModel("NVIDIA H100 80GB HBM3", 81559 * _MIB, "9.0"),
    "h200": GpuModel("NVIDIA H200", 143771 * _MIB, "9.0"),
    "l4": GpuModel("NVIDIA L4", 23034 * _MIB, "8.9"),
    "t4": GpuModel("Tesla T4", 15360 * _MIB, "7.5"),
    "v100": GpuModel("Tesla V100-SXM2-16GB", 16384 * _MIB, "7.0"),
}
