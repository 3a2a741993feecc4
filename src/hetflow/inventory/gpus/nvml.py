"""GPU probe through NVML, the library behind ``nvidia-smi``.

The seam is the ``nvml`` argument: the ``pynvml`` module (from nvidia-ml-py) in
production, ``hetflow.inventory.fakes.nvml.FakeNvml`` in tests.  A machine without the
NVIDIA driver is normal, so "NVML is not usable" is the answer ``None``, not an error.

Topology (PCI bus id, NUMA node, CPU affinity, and how each pair of GPUs is connected)
is best effort: each of those calls may raise ``NVMLError_NotSupported`` (old drivers,
vGPUs, consumer boards), and then that field stays unknown; discovery never fails on it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from hetflow.inventory.gpus.nvmlmig import probe_mig
from hetflow.inventory.models import Gpu, GpuLink, LinkKind

log = logging.getLogger(__name__)


def _text(value: str | bytes) -> str:
    # pynvml before 11.5 returned bytes for names, UUIDs and versions; later ones str.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version as "major.minor": 12040 -> "12.4".

    NVML encodes it as ``1000 * major + 10 * minor`` (nvml.h, cudaDriverGetVersion).
    """
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


NVML_LIBRARY = "libnvidia-ml.so.1"  # what pynvml loads on Linux (its _LoadNvmlLibrary)


def load_pynvml() -> Any:
    """The ``pynvml`` module; None when it cannot be imported or, on Linux, when the NVML
    library it would load is not there (its ``nvmlInit`` would fail with "NVML Shared Library
    Not Found", the same answer: NVML not usable): a machine without NVIDIA's driver does not
    import pynvml's 8,000 lines (about 10 ms of each ``validate``, ``plan``, ``nodes``, issue 43)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(NVML_LIBRARY)  # dlopen: the library stays loaded for pynvml's own CDLL
        except OSError as err:
            log.debug("NVML not usable: %s", err)
            return None
    try:
        import pynvml
    except ImportError:  # nvidia-ml-py is a dependency, but a broken install is possible
        return None
    return pynvml


def _device(nvml: Any, index: int, driver: str, cuda: str | None, topo: _Topology) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
    bus_id = topo.bus_id(handle)
    affinity = topo.cpu_affinity(handle, bus_id)
    mig_enabled, mig = probe_mig(nvml, handle, minor, topo.errors)
    return Gpu(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        model=_text(nvml.nvmlDeviceGetName(handle)),
        memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        compute_capability=f"{major}.{minor_cc}",
        driver_version=driver,
        cuda_version=cuda,
        device_path=f"/dev/nvidia{minor}",
        minor=minor,
        pci_bus_id=bus_id,
        numa_node=topo.numa_node(handle, bus_id, affinity),
        cpu_affinity=affinity,
        mig=mig,
        mig_enabled=mig_enabled,
    )


# NVML's nvmlGpuTopologyLevel_t, nearest first (nvml.h); INTERNAL is two GPUs on one board.
_ANCESTOR_KINDS: dict[int, LinkKind] = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_MAX_LINKS = 18  # pynvml's NVML_NVLINK_MAX_LINKS where the module does not say
_NVLINK_DEVICE_TYPE_SWITCH = 2  # nvmlNvLinkDeviceType_t: 0 GPU, 1 IBM NPU (a CPU), 2 NVSwitch
DEFAULT_PCI_ROOT = Path("/sys/bus/pci/devices")


def sysfs_pci_name(bus_id: str) -> str:
    """NVML's bus id as sysfs names the device: ``"00000000:07:00.0"`` -> ``"0000:07:00.0"``
    (lower case, the 8-hex-digit domain shortened to 4)."""
    domain, sep, rest = bus_id.strip().lower().partition(":")
    if sep and len(domain) == 8:
        domain = domain[4:]
    return f"{domain}{sep}{rest}"


def cpulist(mask_words: Any) -> str:
    """NVML's CPU affinity (64-bit words, CPU 0 in bit 0 of the first) as a cpulist,
    ``"0-15,32-47"``; ``""`` for an empty mask."""
    cpus = [64 * w + bit for w, word in enumerate(mask_words) for bit in range(64) if int(word) >> bit & 1]
    ranges: list[str] = []
    start = prev = -2
    for cpu in [*cpus, -1]:
        if cpu == prev + 1:
            prev = cpu
            continue
        if start >= 0:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def cpu_set(text: str) -> set[int]:
    """A cpulist (``"0-3,8"``) as a set; empty for ``""`` or anything unreadable."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return set()
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def numa_of_cpus(cpus: str, node_root: Path) -> int | None:
    """The NUMA node that holds every CPU of ``cpus`` (sysfs's ``nodeN/cpulist``), as
    ``nvidia-smi topo -m`` derives its NUMA Affinity column from a GPU's CPU affinity; None
    when they span nodes or sysfs says nothing.  A GPU in a VM often has no ``numa_node``
    of its own (NVML and sysfs both say -1) while its CPUs all sit in node 0: seen on an
    H100 under Firecracker (docs/gpu-runs/2026-11-27-h100)."""
    want = cpu_set(cpus)
    if not want:
        return None
    for d in sorted(node_root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            have = cpu_set(d.joinpath("cpulist").read_text())
        except OSError:
            continue
        if want <= have:
            return int(d.name[4:])
    return None


class _Topology:
    """The best-effort topology queries, each one ``unknown`` when NVML says no."""

    def __init__(self, nvml: Any, errors: tuple[type[BaseException], ...], pci_root: Path) -> None:
        self.nvml = nvml
        # AttributeError: an older pynvml without the call; TypeError/ValueError: an odd answer.
        self.errors: tuple[type[BaseException], ...] = (*errors, AttributeError, TypeError, ValueError)
        self.pci_root = pci_root

    def _sysfs(self, bus_id: str, name: str) -> str | None:
        if not bus_id:
            return None
        try:
            return (self.pci_root / sysfs_pci_name(bus_id) / name).read_text().strip()
        except OSError:
            return None

    def bus_id(self, handle: Any) -> str:
        try:
            return _text(self.nvml.nvmlDeviceGetPciInfo(handle).busId).strip()
        except self.errors as err:
            log.debug("no PCI bus id from NVML: %s", err)
            return ""

    def numa_node(self, handle: Any, bus_id: str, affinity: str = "") -> int | None:
        """NVML's, else sysfs's, else the node of the GPU's CPU affinity (``numa_of_cpus``)."""
        value: int | None = None
        try:
            value = int(self.nvml.nvmlDeviceGetNumaNodeId(handle))
        except self.errors as err:
            log.debug("no NUMA node from NVML (%s); trying sysfs", err)
            text = self._sysfs(bus_id, "numa_node")
            value = int(text) if text and text.lstrip("-").isdigit() else None
        if value is None or value < 0:
            # sysfs's own node list, beside the PCI tree it was given (/sys/bus/pci/devices)
            root = self.pci_root.parents[2] / "devices" / "system" / "node" if len(self.pci_root.parents) > 2 else None
            return numa_of_cpus(affinity, root) if root is not None else None
        return value

    def cpu_affinity(self, handle: Any, bus_id: str) -> str:
        text = self._sysfs(bus_id, "local_cpulist")
        if text:
            return text
        words = ((os.cpu_count() or 1) + 63) // 64
        try:
            return cpulist(self.nvml.nvmlDeviceGetCpuAffinity(handle, words))
        except self.errors as err:
            log.debug("no CPU affinity from NVML: %s", err)
            return ""

    def _nvlinks(self, handle: Any, bus_ids: dict[str, int]) -> tuple[Counter[int], int]:
        """Active NVLinks of one GPU: how many go to each other GPU (by index), and how
        many to an NVSwitch."""
        to_gpu: Counter[int] = Counter()
        elsewhere = 0
        for link in range(int(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS))):
            try:
                if not self.nvml.nvmlDeviceGetNvLinkState(handle, link):
                    continue
                remote = _text(self.nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except self.errors:
                continue  # not supported, or no such link on this board
            index = bus_ids.get(sysfs_pci_name(remote))
            if index is not None:
                to_gpu[index] += 1
            elif self._to_switch(handle, link):
                elsewhere += 1
        return to_gpu, elsewhere

    def _to_switch(self, handle: Any, link: int) -> bool:
        # A link to none of our GPUs goes to an NVSwitch or, on POWER9, to the CPU (an NPU);
        # when the driver cannot say which, count a switch (the far commoner machine).
        try:
            kind = int(self.nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
        except self.errors:
            return True
        return kind == _NVLINK_DEVICE_TYPE_SWITCH

    def _ancestor(self, h1: Any, h2: Any) -> LinkKind | None:
        try:
            return _ANCESTOR_KINDS.get(int(self.nvml.nvmlDeviceGetTopologyCommonAncestor(h1, h2)))
        except self.errors as err:
            log.debug("no common ancestor from NVML: %s", err)
            return None

    def links(self, gpus: list[Gpu]) -> list[GpuLink]:
        """How each pair of GPUs is connected: NVLink when there are active links
        between them (directly, or both reach NVSwitches: then every such pair is
        NVLinked, with the smaller of their link counts, as nvidia-smi shows), else
        the PCIe/NUMA level of their nearest common ancestor; pairs NVML cannot
        answer for are left out (unknown)."""
        try:
            handles = [self.nvml.nvmlDeviceGetHandleByIndex(g.index) for g in gpus]
        except self.errors as err:
            log.debug("no handles for topology: %s", err)
            return []
        bus_ids = {sysfs_pci_name(g.pci_bus_id): g.index for g in gpus if g.pci_bus_id}
        nv = [self._nvlinks(h, bus_ids) for h in handles]
        found: list[GpuLink] = []
        for i, gi in enumerate(gpus):
            for j in range(i + 1, len(gpus)):
                gj = gpus[j]
                direct = max(nv[i][0][gj.index], nv[j][0][gi.index])
                switched = min(nv[i][1], nv[j][1])
                count = direct + switched
                if count:
                    lo, hi = sorted((gi.index, gj.index))
                    found.append(GpuLink(a=lo, b=hi, kind="NV", nvlinks=count))
                    continue
                kind = self._ancestor(handles[i], handles[j])
                if kind is not None:
                    lo, hi = sorted((gi.index, gj.index))
                    found.append(GpuLink(a=lo, b=hi, kind=kind))
        return found


def _cuda_or_none(nvml: Any, errors: tuple[type[BaseException], ...]) -> str | None:
    # Drivers older than 418 lack the _v2 call; the CUDA version is optional in Gpu.
    catch: tuple[type[BaseException], ...] = (*errors, AttributeError)
    try:
        return cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion_v2()))
    except catch:
        return None


def probe_nvml(nvml: object | None = None, *, pci_root: Path = DEFAULT_PCI_ROOT) -> list[Gpu] | None:
    """The GPUs NVML sees, in NVML index order; ``None`` when NVML is not usable.
    (``probe_nvml_topology`` also says how they are connected.)"""
    found = probe_nvml_topology(nvml, pci_root=pci_root)
    return None if found is None else found[0]


def probe_nvml_topology(
    nvml: object | None = None, *, pci_root: Path = DEFAULT_PCI_ROOT
) -> tuple[list[Gpu], list[GpuLink]] | None:
    """The GPUs NVML sees, in NVML index order, and the links between each pair of
    them; ``None`` when NVML is not usable.

    ``nvml`` is the ``pynvml`` module (imported when None) or a fake with the same
    functions.  Not usable means: pynvml cannot be imported, the library is missing,
    the driver is not loaded, or any query fails (a GPU that fell off the bus makes
    the whole answer untrustworthy, so the caller falls back to procfs).  Topology
    queries that fail leave their fields unknown instead.  ``pci_root`` is sysfs's
    ``/sys/bus/pci/devices`` (a seam for tests), read for NUMA node and CPU affinity.
    """
    api: Any = load_pynvml() if nvml is None else nvml
    if api is None:
        return None
    # pynvml raises NVMLError subclasses; OSError covers a libnvidia-ml.so that exists
    # but cannot be loaded (wrong architecture, missing dependency).
    errors: tuple[type[BaseException], ...] = (getattr(api, "NVMLError", OSError), OSError)
    try:
        api.nvmlInit()
    except errors as err:
        log.debug("NVML not usable: %s", err)
        return None
    try:
        driver = _text(api.nvmlSystemGetDriverVersion())
        cuda = _cuda_or_none(api, errors)
        topo = _Topology(api, errors, pci_root)
        gpus = [_device(api, i, driver, cuda, topo) for i in range(int(api.nvmlDeviceGetCount()))]
        return gpus, topo.links(gpus)
    except errors as err:
        log.warning("NVML initialised but a query failed (%s); not trusting its answer", err)
        return None
    finally:
        try:
            api.nvmlShutdown()
        except errors as err:
            log.debug("nvmlShutdown failed: %s", err)
