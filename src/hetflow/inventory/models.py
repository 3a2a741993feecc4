"""Inventory models: the hardware of one node, as discovered or as described.

These are frozen pydantic models so they cross module boundaries as values and
serialise to the JSON that ``hetflow nodes --json`` prints (and that cluster files
may embed later).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Cpu(BaseModel):
    """The CPU side of a node, as ``docker info`` and archspec would describe it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vendor: str = Field(description="e.g. GenuineIntel, AuthenticAMD")
    model: str = Field(description="model name from /proc/cpuinfo")
    architecture: str = Field(description="machine architecture, e.g. x86_64, aarch64")
    microarchitecture: str = Field(description="archspec name, e.g. skylake_avx512, zen3")
    x86_64_level: int | None = Field(
        default=None, description="highest x86-64 psABI level (1-4) the CPU meets; None off x86"
    )
    cores: int = Field(ge=1, description="logical CPUs usable by containers")
    features: tuple[str, ...] = Field(default=(), description="sorted feature flags")


class Gpu(BaseModel):
    """One GPU, as ``nvidia-smi -q`` would describe it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, description="NVML index on this node")
    uuid: str
    model: str = Field(description="product name, e.g. NVIDIA A100-SXM4-40GB")
    memory_bytes: int = Field(ge=0)
    compute_capability: str = Field(description='"major.minor", e.g. "8.0"')
    driver_version: str = Field(description='e.g. "550.54.15"; "fake" for fake GPUs')
    cuda_version: str | None = Field(default=None, description="highest CUDA the driver supports")
    device_path: str = Field(description="host device node, e.g. /dev/nvidia0")
    minor: int = Field(ge=0, description="device minor number (195:minor)")
    fake: bool = Field(default=False, description="made up by HETFLOW_FAKE_GPUS; not a real GPU")

    @property
    def compute_capability_tuple(self) -> tuple[int, int]:
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)


class Node(BaseModel):
    """A machine hetflow can place steps on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    os: str = "linux"
    kernel: str = ""
    cpu: Cpu
    memory_bytes: int = Field(ge=0)
    gpus: tuple[Gpu, ...] = ()
    gpu_source: str = Field(default="none", description="nvml, procfs, fake or none")
    control_devices: tuple[str, ...] = Field(
        default=(), description="nvidiactl, nvidia-uvm and friends present on the host"
    )
    container_engine: str | None = Field(default=None, description="podman or docker, if found")
    labels: dict[str, str] = Field(default_factory=dict, description="from HETFLOW_NODE_LABELS=k=v,k2=v2")
