"""The GPUs of a cluster file's node type (``gpus:``), and the speed table behind them.

A node type's GPUs are alike: one vendor, one model, one sharing policy, one MIG layout::

    gpus:
      model: NVIDIA A100-SXM4-80GB
      count: 4
      memory: 80Gi
      computeCapability: "8.0"        # NVIDIA only (and required there)
      sharing: {mode: time-slicing, replicas: 4, slowdown: 0.966}   # or mps, exclusive
      mig: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]   # each GPU's MIG layout (MIG mode on)

    gpus: {vendor: amd, model: AMD Instinct MI250X, count: 8, memory: 64Gi,
           architecture: gfx90a, rocm: "6.0"}

``sharing`` is ``inventory.GpuSharing`` (the NVIDIA device plugin's strategies); MIG is a
layout, not a sharing mode, and is exclusive with time-slicing and MPS (as in the device
plugin, where a GPU in MIG mode is split into its instances).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hetflow.inventory import GpuSharing
from hetflow.spec import cc_tuple, compute_capability, mig_memory_gb, mig_profile, mig_slices, parse_memory

Memory = Annotated[int, BeforeValidator(parse_memory)]

# How fast a GPU step runs relative to an A100 (a GPU variant's ``estimate`` is its A100
# time, so A100 = 1.0).  Matched as a whole word in the product name, case-insensitive.
GPU_SPEEDS: tuple[tuple[str, float, str], ...] = (
    ("A100", 1.0, "reference: a GPU variant's estimate is its A100 run time"),
    # shared/bench/README.md rule 3: a GPU variant is 8.5x the CPU variant on an A100 and
    # 3.0x on a T4, so a T4 runs GPU steps at 3.0 / 8.5 of an A100's speed.
    ("T4", 3.0 / 8.5, "bench rule 3: 3.0x vs 8.5x over a speed-1.0 CPU"),
    # Assumptions, not measurements: published training results (MLPerf Training, NVIDIA's
    # H100 and A100 briefs) put an H100 SXM at roughly 1.6-2x an A100 per GPU, an A100 at
    # roughly 1.8x a V100, and an L4 at roughly 1.4x a T4.  Measured history (a profile)
    # overrides all of these; a cluster file may set ``gpus.speed`` instead.
    ("H100", 1.8, "assumed: ~1.6-2x an A100"),
    ("V100", 0.55, "assumed: an A100 is ~1.8x a V100"),
    ("L4", 0.5, "assumed: ~1.4x a T4"),
    # AMD and Intel: assumptions from vendor datasheets' peak dense FP16/BF16 matrix rates
    # relative to an A100's 312 TFLOPS, discounted because achieved rates trail peak more
    # on these stacks (AMD CDNA2/CDNA3 and Intel Data Center GPU Max datasheets).  A
    # profile or ``gpus.speed`` overrides them.
    ("MI250X", 1.0, "assumed: one MI250X module (2 GCDs, 383 TFLOPS peak FP16) ~ an A100 in practice"),
    ("MI250", 0.95, "assumed: slightly below an MI250X"),
    ("MI210", 0.6, "assumed: 181 TFLOPS peak FP16, ~0.6 of an A100"),
    ("MI300X", 1.8, "assumed: 1307 TFLOPS peak FP16, ~an H100 in practice"),
    ("MI300A", 1.6, "assumed: ~0.9 of an MI300X"),
    ("Max 1550", 1.0, "assumed: Intel Data Center GPU Max 1550 (PVC), ~an A100 in published MLPerf results"),
    ("Max 1100", 0.5, "assumed: about half a Max 1550"),
    ("Flex 170", 0.3, "assumed: an inference card, ~a T4 class"),
)


def default_gpu_speed(model: str) -> float | None:
    """The table's speed for a GPU product name, or None when no entry matches."""
    for key, speed, _ in GPU_SPEEDS:
        if re.search(rf"\b{key}\b", model, re.IGNORECASE):
            return speed
    return None


MIG_MAX_SLICES = 7  # an A100 / H100 has 7 compute slices; every layout fits in them


class GpuSpec(BaseModel):
    """The GPUs of one node type (all alike), in ``nvidia-smi -q`` / ``amd-smi`` terms."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    model: str = Field(min_length=1, description="product name, e.g. NVIDIA A100-SXM4-40GB, AMD Instinct MI250X")
    count: int = Field(ge=1)
    memory: Memory = Field(description="per GPU; 40Gi")
    vendor: Literal["nvidia", "amd", "intel"] = "nvidia"
    compute_capability: str = Field(
        default="", alias="computeCapability", description='NVIDIA: "major.minor", e.g. "8.0"'
    )
    architecture: str = Field(default="", description="AMD gfx target (gfx90a, gfx942); Intel family (pvc)")
    rocm: str = Field(default="", description='AMD: the ROCm version on the nodes, "6.0"')
    driver: str = ""
    cuda: str = Field(default="", description='highest CUDA the driver supports, as nvidia-smi shows it: "12.4"')
    speed: float | None = Field(default=None, gt=0, description="GPU steps run estimate / speed; A100 = 1.0")
    link: Literal["nvlink", "pcie"] | None = Field(
        default=None, description="how the node's GPUs are joined, as `nvidia-smi topo -m` shows: NV# or PCIe"
    )
    nvlink_gpus: int | None = Field(
        default=None, ge=2, description="GPUs in one NVLink domain (default: all of them when link is nvlink)"
    )
    sharing: GpuSharing = Field(default_factory=GpuSharing, description="exclusive, time-slicing or mps")
    mig: tuple[str, ...] = Field(default=(), description="each GPU's MIG layout, e.g. [3g.40gb, 2g.20gb, 1g.10gb]")

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _cc(cls, v: object) -> str:
        return "" if v in ("", None) else compute_capability(v, '"7.5" or "8.0"')

    @field_validator("mig", mode="before")
    @classmethod
    def _mig(cls, v: object) -> object:
        if isinstance(v, list | tuple):
            return tuple(mig_profile(p) for p in v)
        return v

    @model_validator(mode="after")
    def _vendor(self) -> GpuSpec:
        if self.vendor == "nvidia" and not self.compute_capability:
            raise ValueError(
                f'NVIDIA GPU {self.model!r} needs computeCapability (e.g. "8.0"); '
                "set vendor: amd or intel for other GPUs"
            )
        if self.vendor != "nvidia" and self.compute_capability:
            raise ValueError(f"computeCapability is for NVIDIA GPUs; {self.vendor} GPUs have an architecture instead")
        if self.vendor != "amd" and self.rocm:
            raise ValueError("rocm applies to vendor: amd only")
        return self

    @model_validator(mode="after")
    def _layout(self) -> GpuSpec:
        if not self.mig:
            return self
        if self.vendor != "nvidia":
            raise ValueError(f"mig: MIG is an NVIDIA feature; {self.vendor} GPUs have no MIG layout, remove mig")
        if self.sharing.shared:
            raise ValueError(
                f"mig with sharing {self.sharing.mode}: a GPU in MIG mode is split into its instances; "
                "use either mig or sharing, not both"
            )
        slices = sum(mig_slices(p) for p in self.mig)
        if slices > MIG_MAX_SLICES:
            raise ValueError(
                f"mig layout {list(self.mig)} uses {slices} slices; a GPU has {MIG_MAX_SLICES}, drop some instances"
            )
        gib = self.memory / 1024**3
        for p in self.mig:
            if mig_memory_gb(p) > gib + 0.5:
                raise ValueError(f"mig profile {p} needs {mig_memory_gb(p)} GB; the GPU has {gib:g} GiB")
        return self

    @model_validator(mode="after")
    def _known_speed(self) -> GpuSpec:
        if self.speed is None and default_gpu_speed(self.model) is None:
            known = ", ".join(k for k, _, _ in GPU_SPEEDS)
            raise ValueError(
                f"GPU model {self.model!r} has no default speed (known: {known}); "
                "set 'speed' (how fast it runs GPU steps relative to an A100)"
            )
        return self

    @model_validator(mode="after")
    def _domain(self) -> GpuSpec:
        if self.nvlink_gpus is not None and (self.link != "nvlink" or self.nvlink_gpus > self.count):
            raise ValueError(
                f"nvlink_gpus ({self.nvlink_gpus}) needs link: nvlink and at most count ({self.count}) GPUs"
            )
        return self

    @property
    def cc_tuple(self) -> tuple[int, int]:
        return cc_tuple(self.compute_capability) if self.compute_capability else (0, 0)

    @property
    def resolved_speed(self) -> float:
        speed = self.speed if self.speed is not None else default_gpu_speed(self.model)
        assert speed is not None  # _known_speed
        return speed


def mig_memory_bytes(profile: str) -> int:
    """A MIG instance's memory as the planner counts it: its profile's GB, in GiB (the
    ``40gb`` of ``3g.40gb`` is 39.5 GiB on an A100-80GB; the name's number is what users ask by)."""
    return mig_memory_gb(profile) * 1024**3
