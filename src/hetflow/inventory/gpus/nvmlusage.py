"""What NVIDIA GPUs are doing now, through NVML: the source the executor samples to record
each attempt's GPU use (``execute.devices.usage``).

Per device, one ``DeviceSample``: the utilisation NVML reports (``nvmlDeviceGetUtilizationRates``:
the percent of the last sample period, 1/6 s to 1 s, in which a kernel ran: the device's,
whoever ran it), the memory in use on the device (``nvmlDeviceGetMemoryInfo``), and the
compute processes with the memory each holds (``nvmlDeviceGetComputeRunningProcesses``;
``usedGpuMemory`` is None where the driver does not say, e.g. under some virtualisation).
A call that fails leaves its field None ("unknown"), never a guess.

The seam is the ``nvml`` argument: the ``pynvml`` module, or a fake with the same functions.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from hetflow.inventory.gpus.nvml import NVML_LIBRARY, load_pynvml


@dataclass(frozen=True)
class DeviceSample:
    utilization: int | None  # percent, the device's
    memory_used: int | None  # bytes in use on the device, by every process
    processes: tuple[tuple[int, int | None], ...]  # (host pid, bytes it holds or None)


class NvmlUsage:
    """Samples devices by UUID; one NVML session for the source's life (``close`` ends it)."""

    def __init__(self, nvml: Any = None) -> None:
        api = load_pynvml() if nvml is None else nvml
        if api is None:
            raise OSError(f"pynvml (nvidia-ml-py) cannot be imported, or NVML's {NVML_LIBRARY} is not there")
        api.nvmlInit()  # raises pynvml's NVMLError (an Exception) where there is no driver
        self._nvml = api
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _handle(self, uuid: str) -> Any:
        if uuid not in self._handles:
            self._handles[uuid] = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
        return self._handles[uuid]

    def sample(self, uuid: str) -> DeviceSample | None:
        """None when NVML does not know the device (a fake GPU, a UUID gone)."""
        nvml = self._nvml
        with self._lock:  # NVML is thread-safe, our handle cache is not
            try:
                h = self._handle(uuid)
            except Exception:  # pynvml.NVMLError: not found, or the driver went away
                return None
            util = _call(lambda: int(nvml.nvmlDeviceGetUtilizationRates(h).gpu))
            used = _call(lambda: int(nvml.nvmlDeviceGetMemoryInfo(h).used))
            procs = _call(lambda: tuple(_process(p) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h))) or ()
        return DeviceSample(util, used, procs)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # pynvml.NVMLError: nothing to shut down
            self._nvml.nvmlShutdown()


def _call(read: Any) -> Any:
    try:
        return read()
    except Exception:  # pynvml.NVMLError_NotSupported and friends: unknown, not an error
        return None


def _process(p: Any) -> tuple[int, int | None]:
    used = getattr(p, "usedGpuMemory", None)
    # NVML says "not available" with NVML_VALUE_NOT_AVAILABLE (an all-ones unsigned long long)
    known = isinstance(used, int) and 0 <= used < (1 << 63)
    return int(p.pid), (used if known else None)
