"""The GPU model table: what the vendor tools report for each model hetflow knows by
short name (``a100``, ``mi250x``, ``max1550``, ...).  Real data, used by fake GPUs, the
registry's machine profiles and the Slurm backend's default gres types.

Sources: product names as NVML / rocm-smi / xpu-smi print them; memory as nvidia-smi,
rocm-smi (VRAM Total Memory) and xpu-smi report it; PCI device ids from the PCI ID
Repository (pci-ids.ucw.cz: vendor 10de NVIDIA, 1002 AMD, 8086 Intel), cross-checked for
Intel against intel/compute-runtime's device_ids_configs (0x0BD5 "Data Center GPU Max
1550") and for AMD against the ROCm GPU hardware specifications (gfx90a: MI210/MI250X,
gfx942: MI300X).  MIG profiles from NVIDIA's MIG user guide ("Supported MIG Profiles").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOWN_MODELS", "MIG_PROFILES", "GpuModel", "model_by_device_id"]

_MIB = 1024 * 1024

_A100_40 = ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_A100_80 = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_H100 = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_H200 = ("1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")


@dataclass(frozen=True)
class GpuModel:
    """A GPU model as its vendor's tool describes it."""

    product: str  # NVML's nvmlDeviceGetName, rocm-smi's / xpu-smi's product name
    memory_bytes: int  # total device memory as the vendor tool reports it
    compute_capability: str  # NVIDIA only; "" for AMD and Intel
    vendor: str = "nvidia"  # nvidia | amd | intel
    architecture: str = ""  # AMD: gfx target (gfx90a); Intel: family (pvc, dg2); NVIDIA: ""
    device_id: str = ""  # PCI device id, "0x20b0"
    mig_profiles: tuple[str, ...] = ()  # NVIDIA: the MIG profiles of this model; () no MIG

    @property
    def full_mig_profile(self) -> str:
        """The ``7g.*`` profile (the whole GPU as one instance); ``""`` without MIG."""
        return next((p for p in self.mig_profiles if p.startswith("7g.")), "")


KNOWN_MODELS: dict[str, GpuModel] = {
    "a10": GpuModel("NVIDIA A10", 23028 * _MIB, "8.6", device_id="0x2236"),
    "a100": GpuModel("NVIDIA A100-SXM4-40GB", 40960 * _MIB, "8.0", device_id="0x20b0", mig_profiles=_A100_40),
    "a100-80g": GpuModel("NVIDIA A100-SXM4-80GB", 81920 * _MIB, "8.0", device_id="0x20b2", mig_profiles=_A100_80),
    "h100": GpuModel("NVIDIA H100 80GB HBM3", 81559 * _MIB, "9.0", device_id="0x2330", mig_profiles=_H100),
    "h200": GpuModel("NVIDIA H200", 143771 * _MIB, "9.0", device_id="0x2335", mig_profiles=_H200),
    "l4": GpuModel("NVIDIA L4", 23034 * _MIB, "8.9", device_id="0x27b8"),
    "t4": GpuModel("Tesla T4", 15360 * _MIB, "7.5", device_id="0x1eb8"),
    "v100": GpuModel("Tesla V100-SXM2-16GB", 16384 * _MIB, "7.0", device_id="0x1db1"),
    # AMD Instinct: one MI250X package is two GCDs, each its own GPU (KFD node, render
    # node) with 64 GiB; hetflow counts GCDs, as rocm-smi and the k8s device plugin do.
    "mi210": GpuModel("AMD Instinct MI210", 65520 * _MIB, "", "amd", "gfx90a", "0x740f"),
    "mi250x": GpuModel("AMD Instinct MI250X", 65520 * _MIB, "", "amd", "gfx90a", "0x740c"),
    "mi300x": GpuModel("AMD Instinct MI300X", 196288 * _MIB, "", "amd", "gfx942", "0x74a1"),
    # Intel data center GPUs: pvc = Ponte Vecchio (Xe-HPC), dg2 = Xe-HPG (ATS-M).
    "max1550": GpuModel("Intel Data Center GPU Max 1550", 131072 * _MIB, "", "intel", "pvc", "0x0bd5"),
    "max1100": GpuModel("Intel Data Center GPU Max 1100", 49152 * _MIB, "", "intel", "pvc", "0x0bda"),
    "flex170": GpuModel("Intel Data Center GPU Flex 170", 16384 * _MIB, "", "intel", "dg2", "0x56c0"),
}

MIG_PROFILES: dict[str, tuple[str, ...]] = {m.product: m.mig_profiles for m in KNOWN_MODELS.values() if m.mig_profiles}
"""Product name -> its MIG profiles (for GPUs NVML names)."""


def model_by_device_id(vendor: str, device_id: str) -> tuple[str, GpuModel] | None:
    """The known model (short name, model) with this vendor and PCI device id."""
    want = device_id.strip().lower()
    for key, model in KNOWN_MODELS.items():
        if model.vendor == vendor and model.device_id == want:
            return key, model
    return None


# nvidia-smi -q's "Product Architecture" by compute capability (NVIDIA's CUDA GPUs page:
# developer.nvidia.com/cuda-gpus).  Majors hold one architecture, except 7 and 8.
_NVIDIA_ARCH_MAJOR = {3: "Kepler", 5: "Maxwell", 6: "Pascal", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}
_NVIDIA_ARCH = {"7.0": "Volta", "7.2": "Volta", "7.5": "Turing", "8.0": "Ampere", "8.6": "Ampere", "8.7": "Ampere"}
_NVIDIA_ARCH |= {"8.9": "Ada Lovelace"}


def nvidia_architecture(compute_capability: str) -> str:
    """``"9.0"`` -> ``"Hopper"``, as nvidia-smi names it; ``""`` when unknown."""
    if compute_capability in _NVIDIA_ARCH:
        return _NVIDIA_ARCH[compute_capability]
    major = compute_capability.partition(".")[0]
    return _NVIDIA_ARCH_MAJOR.get(int(major), "") if major.isdigit() else ""
