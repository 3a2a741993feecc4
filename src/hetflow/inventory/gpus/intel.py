"""Intel GPUs from DRM sysfs (what xpu-smi and the Intel device plugin look at), best effort.

Each ``/sys/class/drm/renderD*`` whose ``device/vendor`` is ``0x8086`` is an Intel GPU;
``device/device`` is its PCI device id, which ``INTEL_FAMILIES`` turns into a family
(``pvc`` Data Center GPU Max, ``dg2`` Flex and Arc A, ``bmg`` Arc B).  Device ids in no
family (integrated graphics, which no container should be given as a compute GPU) are
skipped with a note.  Memory: i915's ``cardN/lmem_total_bytes``, else the xe driver's
``device/tile*/physical_vram_size_bytes``; unknown (0) otherwise.  The driver name is
the basename of ``device/driver`` (i915 or xe).  Every function reads under ``root``,
so tests give a fake tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from hetflow.inventory.gpus.gpumodels import model_by_device_id
from hetflow.inventory.models import Gpu

DRM = Path("sys/class/drm")
INTEL_VENDOR = "0x8086"

# PCI device id ranges per family (Linux i915/xe pciids: INTEL_PVC_IDS 0x0BD0-0x0BDB,
# INTEL_DG2_IDS 0x5690-0x56C2 incl. ATS-M Flex 0x56C0/0x56C1, INTEL_BMG_IDS 0xE202-0xE212).
INTEL_FAMILIES: tuple[tuple[int, int, str], ...] = (
    (0x0BD0, 0x0BDB, "pvc"),
    (0x5690, 0x56C2, "dg2"),
    (0xE202, 0xE212, "bmg"),
)


def intel_family(device_id: str) -> str:
    """``"0x0bd5"`` -> ``"pvc"``; ``""`` for an id in no known family."""
    try:
        value = int(device_id, 16)
    except ValueError:
        return ""
    return next((name for lo, hi, name in INTEL_FAMILIES if lo <= value <= hi), "")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return 0


def _memory(card_dir: Path | None, device: Path) -> int:
    if card_dir is not None and (lmem := _int(_read(card_dir / "lmem_total_bytes"))):
        return lmem
    return sum(_int(_read(p)) for p in sorted(device.glob("tile*/physical_vram_size_bytes")))


def _bus_id(device: Path) -> str:
    name = Path(os.path.realpath(device)).name
    return name if name.count(":") == 2 else ""


def probe_intel(root: Path = Path("/")) -> tuple[list[Gpu], list[str]]:
    """The Intel GPUs under ``root``'s DRM sysfs in render-minor order, and notes."""
    drm = root / DRM
    gpus: list[Gpu] = []
    notes: list[str] = []
    renders = sorted(drm.glob("renderD*"), key=lambda p: _int(p.name.removeprefix("renderD")))
    for render in renders:
        device = render / "device"
        if _read(device / "vendor").lower() != INTEL_VENDOR:
            continue
        device_id = _read(device / "device").lower()
        family = intel_family(device_id)
        if not family:
            notes.append(f"Intel: {render.name} (device {device_id or 'unknown'}) is in no known GPU family; skipped")
            continue
        minor = _int(render.name.removeprefix("renderD"))
        cards = sorted((device / "drm").glob("card*"))
        card = cards[0] if cards else None
        memory = _memory(drm / card.name if card else None, device)
        if not memory:
            notes.append(f"Intel: {render.name}: device memory unknown (no lmem_total_bytes or tile VRAM size)")
        known = model_by_device_id("intel", device_id)
        bus = _bus_id(device)
        driver = Path(os.path.realpath(device / "driver")).name if (device / "driver").exists() else "unknown"
        gpus.append(
            Gpu(
                index=0,  # discover numbers GPUs across vendors
                uuid=f"GPU-intel-{bus or render.name}",
                model=known[1].product if known else f"Intel GPU {device_id} ({family})",
                memory_bytes=memory,
                vendor="intel",
                architecture=family,
                device_id=device_id,
                render_path=f"/dev/dri/{render.name}",
                card_path=f"/dev/dri/{card.name}" if card else "",
                driver_version=driver,
                device_path=f"/dev/dri/{render.name}",
                minor=minor,
                pci_bus_id=bus,
            )
        )
    return gpus, notes
