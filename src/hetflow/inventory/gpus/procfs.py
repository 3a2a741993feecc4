"""GPU probe from ``/proc/driver/nvidia``, for when NVML is missing.

The kernel module writes one ``gpus/<bus id>/information`` file per GPU and a
``version`` file; that works inside containers that got the driver's procfs but not
libnvidia-ml.so.  It tells less than NVML: no memory size and no compute capability.
"""

from __future__ import annotations

import re
from pathlib import Path

from hetflow.inventory.models import Gpu

DEFAULT_ROOT = Path("/proc/driver/nvidia")

# procfs does not report compute capability, so guess it from the product name.
# Longer names come first: "A100" must win over "A10", "L40S" over "L4".  Values are
# from NVIDIA's CUDA GPUs table (developer.nvidia.com/cuda-gpus).  Unknown models get
# "0.0", which no step's requirement will accept: better unplaced than misplaced.
_COMPUTE_CAPABILITY = (
    ("H200", "9.0"),
    ("H100", "9.0"),
    ("A100", "8.0"),
    ("L40S", "8.9"),
    ("V100", "7.0"),
    ("A10", "8.6"),
    ("L4", "8.9"),
    ("T4", "7.5"),
)
UNKNOWN_COMPUTE_CAPABILITY = "0.0"

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." and the
# open module's "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15 ..."
_NVRM_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def compute_capability_for(model: str) -> str:
    """Compute capability guessed from a product name; "0.0" when the model is unknown."""
    upper = model.upper()
    for key, capability in _COMPUTE_CAPABILITY:
        # A plain substring: "NVIDIA A10G" is an A10 and "NVIDIA GH200" an H200.
        if key in upper:
            return capability
    return UNKNOWN_COMPUTE_CAPABILITY


def parse_information(text: str) -> dict[str, str]:
    """The ``Key: value`` pairs of one ``gpus/*/information`` file."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if separator:
            fields[key.strip()] = value.strip()
    return fields


def parse_driver_version(text: str) -> str | None:
    """The driver version from the ``version`` file, e.g. "550.54.15"."""
    match = _NVRM_VERSION.search(text)
    return match.group(1) if match else None


def _bus_key(fields: dict[str, str], fallback: str) -> str:
    # Bus ids are fixed-width hex ("0000:07:00.0"), so string order is bus order, the
    # order NVML uses by default (CUDA_DEVICE_ORDER=PCI_BUS_ID matches it).
    return fields.get("Bus Location", fallback).lower()


def probe_procfs(root: Path = DEFAULT_ROOT) -> list[Gpu] | None:
    """The GPUs the NVIDIA kernel module lists under ``root``; None without the module.

    ``memory_bytes`` is 0 (procfs does not say) and the compute capability comes from
    the model name (see ``compute_capability_for``).  Indexes follow bus order.
    """
    gpus_dir = root / "gpus"
    if not gpus_dir.is_dir():
        return None
    try:
        driver = parse_driver_version((root / "version").read_text(errors="replace"))
    except OSError:
        driver = None
    found: list[tuple[str, dict[str, str]]] = []
    for info in gpus_dir.glob("*/information"):
        fields = parse_information(info.read_text(errors="replace"))
        found.append((_bus_key(fields, info.parent.name), fields))
    found.sort(key=lambda item: item[0])

    gpus = []
    for index, (_, fields) in enumerate(found):
        model = fields.get("Model", "unknown")
        minor = int(fields.get("Device Minor", index))
        gpus.append(
            Gpu(
                index=index,
                uuid=fields.get("GPU UUID", ""),
                model=model,
                memory_bytes=0,
                compute_capability=compute_capability_for(model),
                driver_version=driver or "unknown",
                device_path=f"/dev/nvidia{minor}",
                minor=minor,
            )
        )
    return gpus
