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


GpuVendorName = Literal["nvidia", "amd", "intel"]
SharingMode = Literal["exclusive", "time-slicing", "mps"]

# Time-slicing's modeled slowdown: a tenant's run time grows by this much per unit of GPU
# load above 1 (the sum of the co-tenants' gpu_share, each a whole GPU's worth when it
# asks for whole GPUs).  The seed talk measured two containers sharing one GPU at 28.7 s
# each against 14.6 s alone: 28.7 / 14.6 - 1 = 0.966 at a load of 2.
DEFAULT_TIMESLICE_SLOWDOWN = round(28.7 / 14.6 - 1, 3)


class GpuSharing(BaseModel):
    """How a node shares each of its GPUs among containers (the NVIDIA device plugin's
    sharing strategies): ``exclusive`` (one container per GPU, the default),
    ``time-slicing`` (up to ``replicas`` containers take turns on a GPU, no memory or
    fault isolation) or ``mps`` (up to ``replicas`` MPS clients run at once, each held to
    its share of the SMs by CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and of memory by
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).  MIG is not a mode: it is a GPU's layout
    (``Gpu.mig``), isolated in hardware."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: SharingMode = "exclusive"
    replicas: int = Field(default=1, ge=1, le=64, description="containers one GPU holds at once")
    slowdown: float | None = Field(
        default=None,
        ge=0,
        le=10,
        description="time-slicing: extra run time per unit of load above 1; None: DEFAULT_TIMESLICE_SLOWDOWN",
    )
    mps_memory_limit: int | None = Field(
        default=None, ge=0, description="MPS: device memory bytes one client may pin; None: its share of the GPU's"
    )

    @model_validator(mode="after")
    def _replicas(self) -> GpuSharing:
        if self.mode == "exclusive" and self.replicas != 1:
            raise ValueError(
                f"exclusive GPUs hold one container each; replicas {self.replicas} needs time-slicing or mps"
            )
        if self.mode != "exclusive" and self.replicas < 2:
            raise ValueError(f"{self.mode} with replicas {self.replicas} shares nothing; give replicas of 2 or more")
        if self.mode != "mps" and self.mps_memory_limit is not None:
            raise ValueError("mps_memory_limit applies to mode: mps only")
        return self

    @property
    def shared(self) -> bool:
        return self.mode != "exclusive"

    @property
    def resolved_slowdown(self) -> float:
        return DEFAULT_TIMESLICE_SLOWDOWN if self.slowdown is None else self.slowdown

    def describe(self) -> str:
        """``exclusive``, ``time-slicing x4``, ``mps x4``."""
        return self.mode if self.mode == "exclusive" else f"{self.mode} x{self.replicas}"


class MigDevice(BaseModel):
    """One MIG instance of a GPU, as ``nvidia-smi -L`` lists it under its GPU
    (``MIG 1g.10gb Device 0: (UUID: MIG-...)``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, description="MIG device index on its GPU")
    uuid: str = Field(description='"MIG-..." as NVIDIA_VISIBLE_DEVICES takes it')
    profile: str = Field(description="e.g. 1g.10gb")
    slices: int = Field(ge=1, le=7, description="compute slices of the GPU's 7")
    memory_bytes: int = Field(ge=0)
    gpu_instance: int = Field(default=0, ge=0, description="GPU instance id")
    compute_instance: int = Field(default=0, ge=0, description="compute instance id")
    cap_paths: tuple[str, ...] = Field(
        default=(), description="/dev/nvidia-caps/nvidia-capN nodes granting access to its GI and CI"
    )


class Gpu(BaseModel):
    """One GPU, as ``nvidia-smi -q``, ``rocm-smi`` or ``xpu-smi`` would describe it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, description="index on this node among the GPUs of all vendors")
    uuid: str
    model: str = Field(description="product name, e.g. NVIDIA A100-SXM4-40GB, AMD Instinct MI250X")
    memory_bytes: int = Field(ge=0)
    compute_capability: str = Field(default="", description='NVIDIA: "major.minor", e.g. "8.0"; "" for others')
    vendor: GpuVendorName = "nvidia"
    architecture: str = Field(
        default="", description="AMD: the gfx target (gfx90a, gfx942); Intel: the family (pvc, dg2); NVIDIA: empty"
    )
    device_id: str = Field(default="", description='PCI device id, e.g. "0x740c"; "" unknown')
    rocm_version: str | None = Field(default=None, description="AMD: the ROCm version installed, e.g. 6.1.2")
    render_path: str = Field(default="", description="AMD/Intel: its DRM render node, /dev/dri/renderD128")
    card_path: str = Field(default="", description="AMD/Intel: its DRM card node, /dev/dri/card1")
    mig: tuple[MigDevice, ...] = Field(default=(), description="NVIDIA: its MIG instances when MIG mode is on")
    mig_enabled: bool = Field(default=False, description="NVIDIA: MIG mode on (then only its instances are given out)")
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
        if not self.compute_capability:
            return (0, 0)
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)

    @property
    def whole_free(self) -> bool:
        """Whether the GPU can be given whole (not cut into MIG instances)."""
        return not self.mig_enabled


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
    gpu_source: str = Field(
        default="none", description="nvml, procfs, fake or none; kfd (AMD) and drm (Intel) joined with commas"
    )
    control_devices: tuple[str, ...] = Field(
        default=(), description="nvidiactl, nvidia-uvm and friends present on the host"
    )
    container_engine: str | None = Field(default=None, description="podman or docker, if found")
    container_runtime: str | None = Field(
        default=None, description="the OCI runtime podman starts steps with, and why (execute.ociruntime)"
    )
    checkpoints: str | None = Field(
        default=None, description="whether CRIU checkpoints work here, with which CRIU, or why not (execute.checkpoint)"
    )
    gpu_checkpoints: str | None = Field(
        default=None,
        description="whether GPU steps' CUDA state can be checkpointed here, or why not (execute.checkpoint)",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="from HETFLOW_NODE_LABELS=k=v,k2=v2")
    gpu_links: tuple[GpuLink, ...] = Field(
        default=(), description="how each pair of GPUs is connected (nvidia-smi topo -m); missing pairs unknown"
    )
    gpu_sharing: GpuSharing = Field(
        default_factory=GpuSharing, description="how each GPU is shared (HETFLOW_GPU_SHARING; a cluster file's sharing)"
    )
    probe_notes: tuple[str, ...] = Field(
        default=(), description="what discovery could not read (a probe that failed says so here, never raises)"
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


def node_fields(data: object) -> object:
    """What ``hetflow nodes --json`` printed for one node, less the fields it adds for
    people (``memory_gib``, ``gpu_count``, each GPU's ``memory_gib`` and
    ``product_architecture``): the Node's own fields, which ``Node.model_validate`` takes
    (it refuses any other, so a typo in a hand-written file is still caught there when it is
    not one of the added ones)."""
    if not isinstance(data, dict):
        return data
    added, gpu_added = ("memory_gib", "gpu_count"), ("memory_gib", "product_architecture")
    out = {k: v for k, v in data.items() if k not in added}
    if isinstance(out.get("gpus"), list):
        out["gpus"] = [
            {k: v for k, v in g.items() if k not in gpu_added} if isinstance(g, dict) else g for g in out["gpus"]
        ]
    return out
