"""Inventory models: the hardware of one node, as discovered or as described.

These are frozen pydantic models so they cross module boundaries as values and
serialise to the JSON that ``hetflow nodes --json`` prints (and that cluster files
may embed later).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
    pci_bus_id: str = Field(default="", description='NVML\'s PCI bus id, e.g. "00000000:07:00.0"; "" unknown')
    numa_node: int | None = Field(default=None, description="NUMA node the GPU hangs off; None unknown")
    cpu_affinity: str = Field(default="", description='cpulist of the CPUs near the GPU, e.g. "0-15,32-47"')

    @property
    def compute_capability_tuple(self) -> tuple[int, int]:
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)


LinkKind = Literal["NV", "PIX", "PXB", "PHB", "NODE", "SYS"]
"""How two GPUs reach each other, as the cells of ``nvidia-smi topo -m``, nearest first."""


class GpuLink(BaseModel):
    """How one unordered pair of GPUs (indexes ``a < b``) is connected.

    ``NV``: joined by ``nvlinks`` NVLinks; ``PIX``: through one PCIe switch; ``PXB``:
    through several PCIe switches; ``PHB``: through a PCIe host bridge; ``NODE``: across
    host bridges inside one NUMA node; ``SYS``: across NUMA nodes (the SMP interconnect).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    a: int = Field(ge=0, description="the lower GPU index")
    b: int = Field(ge=0, description="the higher GPU index")
    kind: LinkKind
    nvlinks: int = Field(default=0, ge=0, description="NVLinks between the two when kind is NV")

    @model_validator(mode="after")
    def _ordered(self) -> GpuLink:
        if self.a >= self.b:
            raise ValueError(f"a GPU link joins two GPUs with a < b, not {self.a} and {self.b}")
        return self

    @property
    def label(self) -> str:
        """The ``nvidia-smi topo -m`` cell: ``NV12`` for NVLink, else the kind."""
        return f"NV{self.nvlinks}" if self.kind == "NV" else self.kind


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
    gpu_links: tuple[GpuLink, ...] = Field(
        default=(), description="how each pair of GPUs is connected (nvidia-smi topo -m); missing pairs unknown"
    )

    def _pair(self, a: int, b: int) -> GpuLink | None:
        lo, hi = min(a, b), max(a, b)
        return next((x for x in self.gpu_links if x.a == lo and x.b == hi), None)

    def link(self, a: int, b: int) -> str:
        """The ``nvidia-smi topo -m`` cell for GPUs ``a`` and ``b``: ``"X"`` for a GPU with
        itself, ``"NV<n>"`` for NVLink, else the kind (``"PIX"`` ... ``"SYS"``); ``""``
        when unknown."""
        if a == b:
            return "X"
        found = self._pair(a, b)
        return "" if found is None else found.label

    def nvlinked(self, a: int, b: int) -> bool:
        """Whether GPUs ``a`` and ``b`` (``a != b``) are joined by NVLink."""
        found = self._pair(a, b)
        return found is not None and found.kind == "NV"
