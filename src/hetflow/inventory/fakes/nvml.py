"""A fake pynvml: the NVML seam of ``probe_nvml`` in tests.

``FakeNvml`` answers the handful of pynvml functions hetflow calls, from a list of
``FakeNvmlDevice`` values; ``MissingNvml`` fails the way pynvml does on a machine
without the NVIDIA driver.  Both raise pynvml's own exception classes, so code under
test catches exactly what it would catch on a real machine.

These are for tests (hetflow's and its users'); the GPUs that ``HETFLOW_FAKE_GPUS``
makes up live in ``hetflow.inventory.fakes.gpus``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pynvml


@dataclass(frozen=True)
class FakeMigDevice:
    """One MIG device of a ``FakeNvmlDevice``, in slot ``slot`` of its GPU."""

    slot: int
    uuid: str = "MIG-5a7b9c1d-2e3f-5a6b-8c9d-0e1f2a3b4c5d"
    name: str = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    memory_bytes: int = 4864 * 1024 * 1024
    gpu_instance: int = 7
    compute_instance: int = 0
    slice_count: int = 1  # nvmlDeviceGetAttributes' gpuInstanceSliceCount


@dataclass(frozen=True)
class FakeMigAttributes:
    """The shape of pynvml's ``c_nvmlDeviceAttributes_t`` (two fields read)."""

    gpuInstanceSliceCount: int  # pynvml's field names
    memorySizeMB: int


@dataclass(frozen=True)
class FakeNvmlDevice:
    """One device as NVML would report it."""

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-8a1c5a3e-0f53-2d29-3f6b-4c2b1d7e9a01"
    memory_bytes: int = 40960 * 1024 * 1024
    compute_capability: tuple[int, int] = (8, 0)
    minor: int = 0
    # Topology; each unknown default makes its NVML call raise NVMLError_NotSupported.
    pci_bus_id: str = ""  # e.g. "00000000:07:00.0"
    numa_node: int | None = None  # nvmlDeviceGetNumaNodeId; -1 is what NVML says for "none"
    cpu_affinity: tuple[int, ...] | None = None  # nvmlDeviceGetCpuAffinity's 64-bit mask words
    nvlinks: tuple[str, ...] = ()  # link i is active and reaches the device with bus id nvlinks[i]
    # "" at position i: link i exists but is down
    mig_mode: int | None = None  # nvmlDeviceGetMigMode's current mode (1 on); None: NotSupported
    mig: tuple[FakeMigDevice, ...] = ()  # its MIG devices when mig_mode is 1


@dataclass(frozen=True)
class FakePciInfo:
    """The shape of pynvml's ``nvmlPciInfo_t`` (only ``busId`` is read)."""

    busId: str | bytes  # pynvml's field name


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
    exercise failures after ``nvmlInit`` succeeded; ``unsupported`` names functions that
    raise ``NVMLError_NotSupported``, as on boards or drivers without the feature.
    ``calls`` records every call by name, so tests can check that ``nvmlShutdown``
    followed ``nvmlInit``.

    Topology: ``ancestors`` maps a pair of device positions (in ``devices``) to what
    ``nvmlDeviceGetTopologyCommonAncestor`` answers (an ``NVML_TOPOLOGY_*`` level; pairs
    not listed are not supported); ``switches`` are the bus ids of NVSwitches, which
    ``nvmlDeviceGetNvLinkRemoteDeviceType`` reports as such (any other remote that is
    not a device is an IBM NPU).
    """

    devices: Sequence[FakeNvmlDevice] = ()
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040  # NVML's encoding: 1000 * major + 10 * minor
    as_bytes: bool = False
    fail_on: str | None = None
    unsupported: frozenset[str] = frozenset()
    ancestors: Mapping[tuple[int, int], int] = field(default_factory=dict)
    switches: frozenset[str] = frozenset()
    calls: list[str] = field(default_factory=list)

    NVMLError = pynvml.NVMLError
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_on:
            raise pynvml.NVMLError_Unknown()
        if name in self.unsupported:
            raise pynvml.NVMLError_NotSupported()

    def _position(self, handle: FakeNvmlDevice) -> int:
        return next(i for i, device in enumerate(self.devices) if device is handle)

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

    def nvmlDeviceGetMigMode(self, handle: FakeNvmlDevice) -> list[int]:
        self._call("nvmlDeviceGetMigMode")
        if handle.mig_mode is None:
            raise pynvml.NVMLError_NotSupported()
        return [handle.mig_mode, handle.mig_mode]  # [current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeNvmlDevice) -> int:
        self._call("nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeNvmlDevice, index: int) -> FakeMigDevice:
        self._call("nvmlDeviceGetMigDeviceHandleByIndex")
        found = next((m for m in handle.mig if m.slot == index), None)
        if found is None:
            raise pynvml.NVMLError_NotFound()
        return found

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigDevice) -> int:
        self._call("nvmlDeviceGetGpuInstanceId")
        return handle.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMigDevice) -> int:
        self._call("nvmlDeviceGetComputeInstanceId")
        return handle.compute_instance

    def nvmlDeviceGetAttributes(self, handle: FakeMigDevice) -> FakeMigAttributes:
        self._call("nvmlDeviceGetAttributes")
        return FakeMigAttributes(handle.slice_count, handle.memory_bytes // (1024 * 1024))

    def nvmlDeviceGetName(self, handle: FakeNvmlDevice | FakeMigDevice) -> str | bytes:
        self._call("nvmlDeviceGetName")
        return self._text(handle.name)

    def nvmlDeviceGetUUID(self, handle: FakeNvmlDevice | FakeMigDevice) -> str | bytes:
        self._call("nvmlDeviceGetUUID")
        return self._text(handle.uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeNvmlDevice | FakeMigDevice) -> FakeMemoryInfo:
        self._call("nvmlDeviceGetMemoryInfo")
        return FakeMemoryInfo(total=handle.memory_bytes, free=handle.memory_bytes)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeNvmlDevice) -> tuple[int, int]:
        self._call("nvmlDeviceGetCudaComputeCapability")
        return handle.compute_capability

    def nvmlDeviceGetMinorNumber(self, handle: FakeNvmlDevice) -> int:
        self._call("nvmlDeviceGetMinorNumber")
        return handle.minor

    def nvmlDeviceGetPciInfo(self, handle: FakeNvmlDevice) -> FakePciInfo:
        self._call("nvmlDeviceGetPciInfo")
        if not handle.pci_bus_id:
            raise pynvml.NVMLError_NotSupported()
        return FakePciInfo(busId=self._text(handle.pci_bus_id))

    def nvmlDeviceGetNumaNodeId(self, handle: FakeNvmlDevice) -> int:
        self._call("nvmlDeviceGetNumaNodeId")
        if handle.numa_node is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.numa_node

    def nvmlDeviceGetCpuAffinity(self, handle: FakeNvmlDevice, cpu_set_size: int) -> list[int]:
        self._call("nvmlDeviceGetCpuAffinity")
        if handle.cpu_affinity is None:
            raise pynvml.NVMLError_NotSupported()
        words = list(handle.cpu_affinity[:cpu_set_size])
        return words + [0] * (cpu_set_size - len(words))

    def _link(self, handle: FakeNvmlDevice, link: int) -> str:
        if not 0 <= link < len(handle.nvlinks):
            raise pynvml.NVMLError_InvalidArgument()
        return handle.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, handle: FakeNvmlDevice, link: int) -> int:
        self._call("nvmlDeviceGetNvLinkState")
        return 1 if self._link(handle, link) else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeNvmlDevice, link: int) -> FakePciInfo:
        self._call("nvmlDeviceGetNvLinkRemotePciInfo")
        remote = self._link(handle, link)
        if not remote:
            raise pynvml.NVMLError_NotSupported()  # a link that is down has no remote end
        return FakePciInfo(busId=self._text(remote))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: FakeNvmlDevice, link: int) -> int:
        self._call("nvmlDeviceGetNvLinkRemoteDeviceType")
        remote = self._link(handle, link)
        if remote in self.switches:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
        if any(device.pci_bus_id == remote for device in self.devices):
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU)

    def nvmlDeviceGetTopologyCommonAncestor(self, first: FakeNvmlDevice, second: FakeNvmlDevice) -> int:
        self._call("nvmlDeviceGetTopologyCommonAncestor")
        a, b = sorted((self._position(first), self._position(second)))
        if (a, b) not in self.ancestors:
            raise pynvml.NVMLError_NotSupported()
        return self.ancestors[(a, b)]

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
