"""AMD GPUs from the KFD topology in sysfs (what rocminfo and rocm-smi read), best effort.

``/sys/class/kfd/kfd/topology/nodes/N/properties`` holds one ``key value`` per line for
each HSA agent; CPU agents have ``simd_count 0``, GPU agents more.  A GPU agent gives:

    gfx_target_version  major*10000 + minor*100 + stepping, decimal: 90010 -> gfx90a,
                        90402 -> gfx942 (the stepping is a hex digit in the target name)
    drm_render_minor    its render node /dev/dri/renderD<minor>
    vendor_id/device_id decimal PCI ids (4098 = 0x1002 AMD; 29708 = 0x740c MI250X GCD)
    unique_id           a 64-bit id (rocm-smi's "Unique ID")
    location_id         PCI bus/device/function: bus = id >> 8, device = (id >> 3) & 31, fn = id & 7
    domain              PCI domain

Memory is the sum of ``mem_banks/*/properties`` ``size_in_bytes`` of its local heaps
(heap_type 1 public, 2 private; 0 is system memory on an APU).  The ROCm version is
``/opt/rocm/.info/version``; the driver version is ``/sys/module/amdgpu/version`` (set
by the DKMS driver; an in-tree amdgpu has none: then the kernel release stands for it).
Every function here reads under a ``root`` directory, so tests give a fake tree; a file
that is missing or odd leaves its field unknown.  When the ``amdsmi`` Python package is
importable, ``amdsmi_names`` asks it for marketing names (optional; not a dependency).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hetflow.inventory.gpus.gpumodels import model_by_device_id
from hetflow.inventory.models import Gpu

log = logging.getLogger(__name__)

KFD_NODES = Path("sys/class/kfd/kfd/topology/nodes")
ROCM_VERSION_FILE = Path("opt/rocm/.info/version")
AMDGPU_VERSION_FILE = Path("sys/module/amdgpu/version")
AMD_VENDOR_ID = 0x1002
# LLVM 20 / ROCm 6.x folded the MI300 pre-production targets into gfx942.
_TARGET_ALIASES = {"gfx940": "gfx942", "gfx941": "gfx942"}


def read_properties(path: Path) -> dict[str, int]:
    """A KFD ``properties`` file as ``{key: int}``; lines that are not ``key int`` are skipped."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value.strip())
        except ValueError:
            continue
    return out


def gfx_target(version: int) -> str:
    """KFD's ``gfx_target_version`` as the LLVM target name: 90010 -> ``gfx90a``,
    90402 -> ``gfx942``, 110000 -> ``gfx1100``; 0 -> ``""``."""
    if version <= 0:
        return ""
    major, rest = divmod(version, 10000)
    minor, step = divmod(rest, 100)
    name = f"gfx{major}{minor}{step:x}"
    return _TARGET_ALIASES.get(name, name)


def _read(root: Path, rel: Path) -> str:
    try:
        return (root / rel).read_text().strip()
    except OSError:
        return ""


def rocm_version(root: Path = Path("/")) -> str | None:
    """``6.2.0`` from ``/opt/rocm/.info/version`` (``6.2.0-66`` there: the build is dropped)."""
    text = _read(root, ROCM_VERSION_FILE)
    return text.split("-", 1)[0] or None if text else None


def _memory(node_dir: Path) -> int:
    total = fallback = 0
    for bank in sorted((node_dir / "mem_banks").glob("*/properties")):
        try:
            props = read_properties(bank)
        except OSError:
            continue
        size = props.get("size_in_bytes", 0)
        fallback += size
        if props.get("heap_type", 1) in (1, 2):
            total += size
    return total or fallback


def _bus_id(props: dict[str, int]) -> str:
    loc = props.get("location_id")
    if loc is None:
        return ""
    domain = props.get("domain", 0)
    return f"{domain:04x}:{loc >> 8 & 0xFF:02x}:{loc >> 3 & 0x1F:02x}.{loc & 7}"


def _gpu(node_dir: Path, props: dict[str, int], rocm: str | None, driver: str) -> Gpu | None:
    minor = props.get("drm_render_minor", -1)
    if props.get("simd_count", 0) <= 0 or minor < 0:
        return None
    device_id = f"0x{props.get('device_id', 0):04x}"
    arch = gfx_target(props.get("gfx_target_version", 0))
    known = model_by_device_id("amd", device_id)
    unique = props.get("unique_id", 0)
    render = f"/dev/dri/renderD{minor}"
    return Gpu(
        index=0,  # discover numbers GPUs across vendors
        uuid=f"GPU-{unique:016x}" if unique else f"GPU-kfd-node{node_dir.name}",
        model=known[1].product if known else f"AMD GPU {device_id} ({arch or 'unknown target'})",
        memory_bytes=_memory(node_dir),
        vendor="amd",
        architecture=arch,
        device_id=device_id,
        rocm_version=rocm,
        render_path=render,
        card_path="",
        driver_version=driver,
        device_path=render,
        minor=minor,
        pci_bus_id=_bus_id(props),
    )


def probe_amd(root: Path = Path("/")) -> tuple[list[Gpu], list[str]]:
    """The AMD GPUs of the KFD topology under ``root`` in KFD node order, and notes on
    what could not be read.  ``([], [])`` when there is no KFD (no amdgpu driver)."""
    nodes_dir = root / KFD_NODES
    if not nodes_dir.is_dir():
        return [], []
    rocm = rocm_version(root)
    driver = _read(root, AMDGPU_VERSION_FILE) or f"amdgpu (in-tree, kernel {os.uname().release})"
    gpus: list[Gpu] = []
    notes: list[str] = []
    for node_dir in sorted(nodes_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        try:
            props = read_properties(node_dir / "properties")
        except OSError as err:
            notes.append(f"AMD: cannot read {node_dir / 'properties'}: {err.strerror or err}")
            continue
        gpu = _gpu(node_dir, props, rocm, driver)
        if gpu is not None:
            gpus.append(gpu.model_copy(update={"card_path": _card(root, gpu.minor)}))
    if gpus and rocm is None:
        notes.append(f"AMD: ROCm version unknown (no {Path('/') / ROCM_VERSION_FILE})")
    return gpus, notes


def _card(root: Path, render_minor: int) -> str:
    """``/dev/dri/cardN`` of a render node, from ``/sys/class/drm/renderD<m>/device/drm/card*``."""
    cards = sorted((root / "sys/class/drm" / f"renderD{render_minor}" / "device/drm").glob("card*"))
    return f"/dev/dri/{cards[0].name}" if cards else ""


def amdsmi_names(api: Any) -> dict[str, str]:
    """Marketing names by PCI bus id from the ``amdsmi`` module (or a fake with its
    functions); ``{}`` when it fails.  Best effort: used to name GPUs the table does not know."""
    names: dict[str, str] = {}
    try:
        api.amdsmi_init()
    except Exception as err:
        log.debug("amdsmi not usable: %s", err)
        return names
    try:
        for handle in api.amdsmi_get_processor_handles():
            bdf = str(api.amdsmi_get_gpu_device_bdf(handle)).lower()
            name = str(api.amdsmi_get_gpu_asic_info(handle).get("market_name", "")).strip()
            if name:
                names[bdf] = name
    except Exception as err:
        log.debug("amdsmi query failed: %s", err)
    finally:
        try:
            api.amdsmi_shut_down()
        except Exception as err:
            log.debug("amdsmi_shut_down failed: %s", err)
    return names
