"""A GPU's MIG instances through NVML (what ``nvidia-smi -L`` lists under a GPU), best effort.

For a GPU with MIG mode on (``nvmlDeviceGetMigMode`` current == 1), each slot up to
``nvmlDeviceGetMaxMigDeviceCount`` may hold a MIG device
(``nvmlDeviceGetMigDeviceHandleByIndex``; an empty slot raises NotFound).  Its UUID, GPU
and compute instance ids and memory come from the MIG handle; its profile from its name
(NVML names a MIG device ``"NVIDIA A100-SXM4-40GB MIG 1g.5gb"``), else from
``nvmlDeviceGetAttributes`` (slices and memory).  The ``/dev/nvidia-caps`` nodes that
grant access are numbered as in /proc/driver/nvidia-caps/mig-minors (``mig_cap_minors``; the fake
GPUs' nodes, ``fakedevnodes``, are numbered by it too).
A GPU or driver without MIG (NotSupported, an old pynvml without the calls) has MIG off.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from hetflow.inventory.models import MigDevice

log = logging.getLogger(__name__)

NVML_DEVICE_MIG_ENABLE = 1  # nvml.h
CAPS_DIR = "/dev/nvidia-caps"
_PROFILE = re.compile(r"(\d)g\.(\d+)gb")


def mig_cap_minors(gpu_minor: int, gpu_instance: int, compute_instance: int) -> tuple[int, int]:
    """The nvidia-caps minors of ``gpuG/giI/access`` and ``gpuG/giI/ciC/access`` as the
    driver lists them in /proc/driver/nvidia-caps/mig-minors (minors 1 and 2 are the
    config and monitor caps; each GPU has 15 GIs of 1 + 8 CIs each)."""
    gi = 3 + gpu_minor * 15 * 9 + gpu_instance * 9
    return gi, gi + 1 + compute_instance


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _profile(nvml: Any, handle: Any, errors: tuple[type[BaseException], ...]) -> str:
    match = _PROFILE.search(_text(nvml.nvmlDeviceGetName(handle)))
    if match:
        return match[0]
    try:
        attrs = nvml.nvmlDeviceGetAttributes(handle)
        return f"{int(attrs.gpuInstanceSliceCount)}g.{round(int(attrs.memorySizeMB) / 1024)}gb"
    except errors:
        return ""


def probe_mig(
    nvml: Any, handle: Any, gpu_minor: int, errors: tuple[type[BaseException], ...]
) -> tuple[bool, tuple[MigDevice, ...]]:
    """Whether MIG mode is on for the GPU ``handle``, and its MIG devices in slot order."""
    catch: tuple[type[BaseException], ...] = (*errors, AttributeError, TypeError, ValueError)
    try:
        current = int(nvml.nvmlDeviceGetMigMode(handle)[0])
    except catch as err:
        log.debug("no MIG mode from NVML: %s", err)
        return False, ()
    if current != NVML_DEVICE_MIG_ENABLE:
        return False, ()
    devices: list[MigDevice] = []
    try:
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except catch as err:
        log.debug("MIG on but no device count from NVML: %s", err)
        return True, ()
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except catch:
            continue  # an empty slot: NVML_ERROR_NOT_FOUND
        try:
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
            profile = _profile(nvml, mig, catch)
            caps = tuple(f"{CAPS_DIR}/nvidia-cap{m}" for m in mig_cap_minors(gpu_minor, gi, ci))
            devices.append(
                MigDevice(
                    index=len(devices),
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    profile=profile or "unknown",
                    slices=int(profile[0]) if profile else 1,
                    memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(mig).total),
                    gpu_instance=gi,
                    compute_instance=ci,
                    cap_paths=caps,
                )
            )
        except catch as err:
            log.warning("MIG device in slot %d of GPU minor %d unreadable: %s", slot, gpu_minor, err)
    return True, tuple(devices)
