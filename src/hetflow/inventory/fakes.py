"""Test fakes for the NVML seam of ``probe_nvml``.

``FakeNvml`` answers the handful of pynvml functions hetflow calls, from a list of
``FakeNvmlDevice`` values; ``MissingNvml`` fails the way pynvml does on a machine
without the NVIDIA driver.  Both raise pynvml's own exception classes, so code under
test catches exactly what it would catch on a real machine.

These are for tests (hetflow's and its users'); the GPUs that ``HETFLOW_FAKE_GPUS``
makes up live in ``hetflow.inventory.fake``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pynvml


@dataclass(frozen=True)
class FakeNvmlDevice:
    """One device as NVML would report it."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-8a1c5a3e-0f53-2d29-3f6b-4c2b1d7e9a01"
    memory_bytes: int = 40960 * 1024 * 1024
    compute_capability: tuple[int, int] = (8, 0)
    minor: int = 0


@dataclass(frozen=True)
class FakeMemoryInfo:
    """The shape of pynvml's ``c_nvmlMemory_t`` (only ``total`` is read)."""

    total: int
    free: int
    used: int = 0


@dataclass
class FakeNvml:
    """A stand-in for the ``pynvml`` module.

    ``as_bytes`` makes string answers ``bytes``, as pynvml releases before 11.5 did.
    ``fail_on`` names one function that raises ``NVMLError_Unknown`` when called, to
    exercise failures after ``nvmlInit`` succeeded.  ``calls`` records every call by
    name, so tests can check that ``nvmlShutdown`` followed ``nvmlInit``.
    """

    devices: Sequence[FakeNvmlDevice] = ()
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040  # NVML's encoding: 1000 * major + 10 * minor
    as_bytes: bool = False
    fail_on: str | None = None
    calls: list[str] = field(default_factory=list)

    NVMLError = pynvml.NVMLError

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_on:
            raise pynvml.NVMLError_Unknown()

    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.as_bytes else value

    def nvmlInit(self) -> None:
        self._call("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeNvmlDevice:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError_InvalidArgument()
        return self.devices[index]

    def nvmlDeviceGetName(self, handle: FakeNvmlDevice) -> str | bytes:
        self._call("nvmlDeviceGetName")
        return self._text(handle.name)

    def nvmlDeviceGetUUID(self, handle: FakeNvmlDevice) -> str | bytes:
        self._call("nvmlDeviceGetUUID")
        return self._text(handle.uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeNvmlDevice) -> FakeMemoryInfo:
        self._call("nvmlDeviceGetMemoryInfo")
        return FakeMemoryInfo(total=handle.memory_bytes, free=handle.memory_bytes)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeNvmlDevice) -> tuple[int, int]:
        self._call("nvmlDeviceGetCudaComputeCapability")
        return handle.compute_capability

    def nvmlDeviceGetMinorNumber(self, handle: FakeNvmlDevice) -> int:
        self._call("nvmlDeviceGetMinorNumber")
        return handle.minor

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._call("nvmlSystemGetDriverVersion")
        return self._text(self.driver_version)

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._call("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_driver_version


class MissingNvml(FakeNvml):
    """NVML on a machine without the NVIDIA driver: ``nvmlInit`` cannot load
    libnvidia-ml.so.1 and raises ``NVMLError_LibraryNotFound``, as pynvml does."""

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        raise pynvml.NVMLError_LibraryNotFound()
