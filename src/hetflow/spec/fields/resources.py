"""What a step asks of a machine: CPUs, memory, GPUs (whole, a share, a MIG instance) and
which GPUs qualify; ``GpuRequest`` is the one value every stage reads a GPU request through.

``SpecModel`` is the base of every model of the format (here and in ``models``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hetflow.spec.fields.units import cc_tuple, compute_capability, parse_memory

Memory = Annotated[int, BeforeValidator(parse_memory)]

# Bounds a container engine or backend would otherwise enforce only at run time.
MIN_CPUS = 0.01  # podman --cpus: the CFS quota is cpus * 100ms period, and the kernel's smallest quota is 1ms
MAX_CPUS = 100_000
MIN_MEMORY = 6 * 1024**2  # runc (and so podman) refuse a memory limit below 6 MiB
MAX_MEMORY = 1024**5  # 1 PiB: no node has more; a larger value is a unit slip
MAX_GPUS = 1024
MIN_GPU_SHARE = 0.01  # MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is a whole percent


class SpecModel(BaseModel):
    """Every model of the format: frozen, and an unknown key is an error (a typo is reported)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


GpuVendor = Literal["nvidia", "amd", "intel", "any"]


MIG_PROFILE_RE = re.compile(r"^([1-7])g\.(\d{1,3})gb(\+me)?\Z")
MIG_HINT = "write a MIG profile as nvidia-smi names it: <slices>g.<memory>gb, e.g. 1g.10gb or 3g.40gb"


def mig_profile(v: str) -> str:
    """A MIG profile name as ``nvidia-smi mig -lgip`` prints it (``1g.10gb``, ``3g.40gb``,
    ``1g.10gb+me``); lower-cased, else ``ValueError`` naming the value."""
    text = str(v).strip().lower()
    if not MIG_PROFILE_RE.match(text):
        raise ValueError(f"{v!r} is not a MIG profile; {MIG_HINT}")
    return text


def mig_slices(profile: str) -> int:
    """The compute slices (of 7) of a MIG profile: ``3g.40gb`` -> 3."""
    return int(profile.split("g.", 1)[0])


def mig_memory_gb(profile: str) -> int:
    """The memory (GB, as named) of a MIG profile: ``3g.40gb`` -> 40."""
    return int(profile.split("g.", 1)[1].split("gb", 1)[0])


@dataclass(frozen=True)
class GpuRequest:
    """The accelerators one container asks for, in one value: every stage (filters,
    planner, isolation, backends) reads a step's GPU request through this.

    Exactly one of: ``count`` whole devices; ``share``, a time-sliced or MPS fraction of
    one device (0 < share < 1: how much of a whole GPU the step keeps busy alone); ``mig``,
    one MIG instance of a profile (``1g.10gb``).  ``vendor`` says whose GPUs qualify
    (``any``: whichever); ``memory`` is the device memory the step needs (0: no need
    stated), per device, or of the shared device / MIG instance."""

    count: int = 0  # whole devices
    vendor: GpuVendor = "nvidia"
    share: float | None = None  # a time-sliced / MPS fraction of one device (0 < share < 1)
    mig: str | None = None  # one MIG instance of this profile, e.g. "1g.10gb"
    memory: int = 0  # bytes of device memory needed, per device (0: not stated)

    @property
    def whole(self) -> bool:
        """Whole devices (or none): nothing shared, nothing sliced."""
        return self.share is None and self.mig is None

    @property
    def any(self) -> bool:
        """Whether any accelerator is asked for."""
        return self.count > 0 or not self.whole

    @property
    def devices(self) -> int:
        """Devices the container sees: its whole GPUs, or the one it shares or slices."""
        return self.count if self.whole else 1

    @property
    def kind(self) -> str:
        """``"none"``, ``"whole"``, ``"share"`` or ``"mig"``."""
        if self.mig is not None:
            return "mig"
        if self.share is not None:
            return "share"
        return "whole" if self.count else "none"

    def describe(self) -> str:
        """For messages: ``2 nvidia GPUs``, ``0.25 of an amd GPU``, ``a MIG 1g.10gb instance``."""
        who = "" if self.vendor == "any" else f"{self.vendor} "
        if self.mig is not None:
            return f"a MIG {self.mig} instance"
        if self.share is not None:
            return f"{self.share:g} of one {who}GPU"
        if self.count:
            return f"{self.count} {who}GPU{'s' if self.count != 1 else ''}"
        return "no GPU"


class Resources(SpecModel):
    """What one container of a step needs (Kubernetes requests; Slurm -c/--mem/--gpus).

    GPUs: exactly one of ``gpus`` (whole devices), ``gpu_share`` (a time-sliced or MPS
    fraction of one device) or ``gpu_mig`` (one MIG instance of a profile); ``gpu_vendor``
    (nvidia, amd, intel or any) and ``gpu_memory`` (per device) qualify any of them."""

    cpus: float = Field(default=1.0, gt=0, description="logical CPUs")
    memory: Memory = Field(default=512 * 1024**2, description="bytes; 512Mi, 2Gi, ...")
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS, description="whole GPUs")
    gpu_share: float | None = Field(
        default=None, description="a fraction of one GPU, time-sliced or MPS (0 < share < 1), e.g. 0.25"
    )
    gpu_mig: str | None = Field(default=None, description="one MIG instance of this profile, e.g. 1g.10gb")
    gpu_vendor: GpuVendor = Field(default="nvidia", description="whose GPUs: nvidia (default), amd, intel or any")
    gpu_memory: Memory = Field(default=0, description="device memory needed per GPU; 16Gi")

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, v: float) -> float:
        if not math.isfinite(v) or not MIN_CPUS <= v <= MAX_CPUS:
            raise ValueError(
                f"cpus must be between {MIN_CPUS} (the smallest share cgroups can enforce: podman --cpus) "
                f"and {MAX_CPUS:,}; got {v:g}"
            )
        return v

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: int) -> int:
        if not MIN_MEMORY <= v <= MAX_MEMORY:
            raise ValueError(f"memory must be between 6Mi (the least podman/runc accept) and 1Pi; got {v:,} bytes")
        return v

    @field_validator("gpu_share", mode="before")
    @classmethod
    def _share(cls, v: object) -> object:
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v < 1:
            raise ValueError(
                f"gpu_share must be a fraction of one GPU between 0 and 1 (exclusive), e.g. 0.25; got {v!r}; "
                "for whole GPUs write gpus: N"
            )
        if v < MIN_GPU_SHARE:
            raise ValueError(f"gpu_share {v:g} is below {MIN_GPU_SHARE} (1% of a GPU, MPS's smallest thread share)")
        return float(v)

    @field_validator("gpu_mig", mode="before")
    @classmethod
    def _mig(cls, v: object) -> object:
        return None if v is None else mig_profile(str(v))

    @field_validator("gpu_memory")
    @classmethod
    def _gpu_memory(cls, v: int) -> int:
        if not 0 <= v <= MAX_MEMORY:
            raise ValueError(f"gpu_memory must be between 0 and 1Pi; got {v:,} bytes")
        return v

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> Resources:
        kinds = (
            ("gpus", self.gpus > 0),
            ("gpu_share", self.gpu_share is not None),
            ("gpu_mig", self.gpu_mig is not None),
        )
        asked = [k for k, on in kinds if on]
        if len(asked) > 1:
            raise ValueError(
                f"give exactly one of gpus, gpu_share or gpu_mig, not {' and '.join(asked)}: whole GPUs, "
                "a fraction of one GPU, or one MIG instance"
            )
        if not asked and "gpu_vendor" in self.model_fields_set:
            raise ValueError(
                f"gpu_vendor: {self.gpu_vendor} asks for no GPU; add gpus: N, gpu_share or gpu_mig, or drop gpu_vendor"
            )
        if not asked and self.gpu_memory:
            raise ValueError("gpu_memory asks for no GPU; add gpus: N, gpu_share or gpu_mig, or drop gpu_memory")
        if self.gpu_mig is not None and self.gpu_vendor not in ("nvidia", "any"):
            raise ValueError(
                f"gpu_mig is NVIDIA's Multi-Instance GPU; gpu_vendor {self.gpu_vendor} has no MIG: "
                "use gpu_share or whole gpus, or gpu_vendor: nvidia"
            )
        if self.gpu_mig is not None and self.gpu_memory > mig_memory_gb(self.gpu_mig) * 1000**3:
            raise ValueError(
                f"gpu_memory ({self.gpu_memory / 1024**3:g}Gi) is more than MIG profile {self.gpu_mig} holds; "
                "pick a larger profile or lower gpu_memory"
            )
        return self

    @property
    def gpu_request(self) -> GpuRequest:
        """The accelerator request as one value (see ``GpuRequest``)."""
        return GpuRequest(
            count=self.gpus, vendor=self.gpu_vendor, share=self.gpu_share, mig=self.gpu_mig, memory=self.gpu_memory
        )

    @property
    def uses_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_share is not None or self.gpu_mig is not None


class GpuConstraint(SpecModel):
    """Which GPUs qualify (Mesos-style GPU attributes, GFD labels in Kubernetes)."""

    min_memory: Memory = Field(default=0)
    min_compute_capability: str = Field(default="0.0")
    models: tuple[str, ...] = Field(default=(), description="substrings of accepted product names, e.g. [A100, H100]")

    @field_validator("min_compute_capability", mode="before")
    @classmethod
    def _cc(cls, v: object) -> str:
        return compute_capability(v)

    @property
    def cc_tuple(self) -> tuple[int, int]:
        return cc_tuple(self.min_compute_capability)
