"""Fake GPUs from configuration, for trying hetflow on a machine without GPUs.

``HETFLOW_FAKE_GPUS=a100:2,t4:1`` makes up three GPUs.  An entry may end in a topology
word, ``a100:4:nvlink``, ``a100:4:nvlink-pairs`` or ``t4:4:pcie`` (see ``TOPOLOGIES``):
then its GPUs are split in two halves over NUMA nodes 0 and 1 (the first half, rounded
up, on node 0), each half near one half of this host's CPUs, and every pair of them
gets a link as ``nvidia-smi topo -m`` would show it; pairs from two entries that both
have a topology are ``NODE`` on one NUMA node and ``SYS`` across.  Without the word a
GPU's NUMA node, CPU affinity and links stay unknown, as before.  So that containers can be
started exactly as on a GPU machine (``--device`` needs a character device), each fake
GPU gets a real device node ``<dev_dir>/nvidiaN`` (major 195, like the NVIDIA driver's)
plus ``nvidiactl`` (195:255).  No driver answers on those nodes: opening one fails with
ENXIO, which is fine for steps that only check that a GPU was assigned.

AMD and Intel models (``mi250x:2``, ``max1550``) get DRM nodes instead, and AMD ones
``kfd`` too (see ``fakedevnodes``); GPU indexes run across vendors in entry order, NVIDIA
minors count NVIDIA GPUs only, and DRM numbers count the AMD and Intel ones.  A ``mig=``
word anywhere after the model puts every GPU of the entry in MIG mode with that layout:
``h100:1:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb`` or ``a100-80g:2:nvlink:mig=7g.80gb``.
AMD and Intel entries take the ``pcie`` topology word only (NVLink is NVIDIA's).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from hetflow.errors import InventoryError
from hetflow.inventory.fakes.devnodes import (
    ENV_VAR,
    NVIDIA_MAJOR,
    NVIDIACTL_MINOR,
    MknodFn,
    check_mig_layout,
    ensure_char_device,
    make_dri_nodes,
    make_kfd,
    make_mig_devices,
)
from hetflow.inventory.gpus.gpumodels import KNOWN_MODELS, GpuModel
from hetflow.inventory.models import Gpu, GpuLink

__all__ = ["ENV_VAR", "NVIDIACTL_MINOR", "NVIDIA_MAJOR", "FakeEntry", "make_fake_gpus", "parse_fake_entries"]


# Minor 255 belongs to nvidiactl, so at most 255 GPUs fit in 195:0..254.
MAX_FAKE_GPUS = NVIDIACTL_MINOR


def _known() -> str:
    return ", ".join(sorted(KNOWN_MODELS))


# The topology words an entry may end in: every pair NVLinked (NV12); NVLinked pairs
# 0-1, 2-3, ... (NV4), the other pairs NODE in a NUMA half and SYS across; no NVLink, one
# PCIe switch per NUMA half (PIX inside, SYS across).
TOPOLOGIES = ("nvlink", "nvlink-pairs", "pcie")
FULL_NVLINKS = 12  # NV12: an A100's twelve NVLinks, as on an HGX A100 board
PAIR_NVLINKS = 4  # NV4: an NVLink bridge between two boards


@dataclass(frozen=True)
class FakeEntry:
    """One entry of ``HETFLOW_FAKE_GPUS``: ``model[:count[:topology]][:mig=P+P...]``."""

    model: str
    count: int
    topology: str | None = None  # one of TOPOLOGIES; None: links unknown
    mig: tuple[str, ...] = ()  # MIG layout of each GPU of the entry; () MIG off


def _split_mig(entry: str, model: str) -> tuple[list[str], tuple[str, ...] | None]:
    """The positional words after the model, and the ``mig=`` layout (None: no word)."""
    words = entry.split(":")[1:]
    migs = [w for w in words if w.strip().lower().startswith("mig=")]
    if len(migs) > 1:
        raise InventoryError(f"{ENV_VAR}: {entry!r} has {len(migs)} mig= words; give one, e.g. '{model}:1:mig=7g.80gb'")
    rest = [w for w in words if w not in migs]
    if len(rest) > 2:
        raise InventoryError(
            f"{ENV_VAR}: {entry!r} has too many words; write MODEL[:COUNT[:TOPOLOGY]][:mig=LAYOUT], "
            f"e.g. 'h100:1:mig=3g.40gb+4g.40gb'"
        )
    if not migs:
        return rest, None
    layout = migs[0].strip().lower().removeprefix("mig=")
    return rest, tuple(p.strip() for p in layout.split("+") if p.strip())


def parse_fake_entries(text: str) -> list[FakeEntry]:
    """``"a100:4:nvlink,t4"`` -> ``[FakeEntry("a100", 4, "nvlink"), FakeEntry("t4", 1)]``.

    A bare model means one GPU (``"t4"``), and so does a model with only a topology
    (``"t4:pcie"``); names and words are case-insensitive; empty entries (a trailing
    comma) are skipped.  Raises ``InventoryError`` naming the bad entry.
    """
    entries: list[FakeEntry] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        model = entry.partition(":")[0].strip().lower()
        if model not in KNOWN_MODELS:
            raise InventoryError(f"{ENV_VAR}: {entry!r} names no known model; use one of {_known()}")
        words, mig = _split_mig(entry, model)
        count_text = words[0] if words else ""
        topology_text = words[1] if len(words) > 1 else ""
        count_text = count_text.strip().lower() or "1"
        topology_text = topology_text.strip().lower()
        if count_text in TOPOLOGIES and not topology_text:
            count_text, topology_text = "1", count_text
        if not count_text.isdigit() or int(count_text) < 1:
            raise InventoryError(
                f"{ENV_VAR}: {entry!r} has a bad count {count_text!r}; "
                f"write a whole number of at least 1, e.g. '{model}:2'"
            )
        if topology_text and topology_text not in TOPOLOGIES:
            raise InventoryError(
                f"{ENV_VAR}: {entry!r} has an unknown topology {topology_text!r}; "
                f"use one of {', '.join(TOPOLOGIES)}, e.g. '{model}:{count_text}:nvlink'"
            )
        known = KNOWN_MODELS[model]
        if known.vendor != "nvidia" and topology_text.startswith("nvlink"):
            raise InventoryError(
                f"{ENV_VAR}: {entry!r}: {model} is an {known.vendor.upper()} GPU without NVLink; "
                f"use the pcie topology word or none, e.g. '{model}:{count_text}:pcie'"
            )
        if mig is not None:
            check_mig_layout(entry, model, known, mig)
        entries.append(FakeEntry(model, int(count_text), topology_text or None, mig or ()))
    total = sum(e.count for e in entries)
    if total > MAX_FAKE_GPUS:
        raise InventoryError(
            f"{ENV_VAR}: {text!r} asks for {total} GPUs; at most {MAX_FAKE_GPUS} fit "
            f"in device minors 0-{MAX_FAKE_GPUS - 1}"
        )
    return entries


def parse_fake_spec(text: str) -> list[tuple[str, int]]:
    """``"a100:2,t4:1"`` -> ``[("a100", 2), ("t4", 1)]``: the models and counts of
    ``parse_fake_entries`` (which also keeps each entry's topology word)."""
    return [(e.model, e.count) for e in parse_fake_entries(text)]


class _Place(NamedTuple):
    """Where one fake GPU sits: its entry (position in the spec) and NUMA half."""

    entry: int
    local: int  # index inside its entry
    topology: str | None
    half: int  # 0 or 1: NUMA node, when topology is not None


def _places(entries: list[FakeEntry]) -> list[_Place]:
    places: list[_Place] = []
    for e, entry in enumerate(entries):
        first_half = (entry.count + 1) // 2
        places += [_Place(e, k, entry.topology, 0 if k < first_half else 1) for k in range(entry.count)]
    return places


def _link(a: int, b: int, pa: _Place, pb: _Place) -> GpuLink | None:
    if pa.topology is None or pb.topology is None:
        return None
    same_half = pa.half == pb.half
    if pa.entry != pb.entry:
        return GpuLink(a=a, b=b, kind="NODE" if same_half else "SYS")
    if pa.topology == "nvlink":
        return GpuLink(a=a, b=b, kind="NV", nvlinks=FULL_NVLINKS)
    if pa.topology == "nvlink-pairs":
        if pa.local // 2 == pb.local // 2:
            return GpuLink(a=a, b=b, kind="NV", nvlinks=PAIR_NVLINKS)
        return GpuLink(a=a, b=b, kind="NODE" if same_half else "SYS")
    return GpuLink(a=a, b=b, kind="PIX" if same_half else "SYS")  # pcie


def entry_links(entries: list[FakeEntry]) -> tuple[GpuLink, ...]:
    """How each pair of the GPUs of ``entries`` is connected (GPU indexes in entry
    order); pairs involving an entry without a topology word are left out (unknown)."""
    places = _places(entries)
    links = (_link(a, b, places[a], places[b]) for a in range(len(places)) for b in range(a + 1, len(places)))
    return tuple(link for link in links if link is not None)


def fake_links(spec: str) -> tuple[GpuLink, ...]:
    """``entry_links`` of the entries of ``spec``, the fake GPUs of ``make_fake_gpus``."""
    return entry_links(parse_fake_entries(spec))


class Placement(NamedTuple):
    """Where one GPU of some entries sits: the topology fields of its ``Gpu``."""

    pci_bus_id: str
    numa_node: int | None
    cpu_affinity: str


def entry_placements(entries: list[FakeEntry], cpus: int) -> list[Placement]:
    """Per GPU of ``entries`` (in order): a made-up PCI bus id and, for an entry with a
    topology word, its NUMA half and that half of ``cpus`` CPUs (unknown otherwise)."""
    return [
        Placement(fake_bus_id(i), p.half, half_cpulist(cpus, p.half))
        if p.topology is not None
        else Placement(fake_bus_id(i), None, "")
        for i, p in enumerate(_places(entries))
    ]


def half_cpulist(cpus: int, half: int) -> str:
    """The cpulist of one half of ``cpus`` CPUs: 16 -> ``"0-7"`` and ``"8-15"``; one
    CPU is near both halves."""
    if cpus < 2:
        return "0"
    mid = cpus // 2
    first, last = (0, mid - 1) if half == 0 else (mid, cpus - 1)
    return str(first) if first == last else f"{first}-{last}"


def fake_bus_id(index: int) -> str:
    """A made-up PCI bus id in NVML's form, ``"00000000:10:00.0"`` for GPU 0 (bus 0x10 on)."""
    domain, bus = divmod(0x10 + index, 0x100)
    return f"{domain:08X}:{bus:02X}:00.0"


def fake_uuid(model: str, index: int) -> str:
    """A stable UUID: ``GPU-fake-`` then a real UUID's 8-4-4-4-12 hex groups.

    Real ones read ``GPU-8a1c5a3e-0f53-...``; the ``fake`` word keeps these from ever
    being mistaken for one, and hashing model and index keeps them stable across runs.
    """
    h = hashlib.sha256(f"{model}:{index}".encode()).hexdigest()
    return f"GPU-fake-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def ensure_device_node(path: Path, minor: int, *, mknod: MknodFn = os.mknod) -> None:
    """Make ``path`` the NVIDIA character device 195:``minor``, keeping a correct one as it is."""
    ensure_char_device(path, NVIDIA_MAJOR, minor, mknod=mknod)


def _nvidia(key: str, model: GpuModel, entry: FakeEntry, index: int, minor: int, dev_dir: Path) -> Gpu:
    path = dev_dir / f"nvidia{minor}"
    ensure_device_node(path, minor)
    uuid = fake_uuid(key, index)
    mig = make_mig_devices(uuid, minor, model, entry.mig, dev_dir) if entry.mig else ()
    return Gpu(
        index=index,
        uuid=uuid,
        model=model.product,
        memory_bytes=model.memory_bytes,
        compute_capability=model.compute_capability,
        device_id=model.device_id,
        mig=mig,
        mig_enabled=bool(entry.mig),
        driver_version="fake",
        device_path=str(path),
        minor=minor,
        fake=True,
    )


def _drm(key: str, model: GpuModel, index: int, k: int, dev_dir: Path) -> Gpu:
    render, card = make_dri_nodes(dev_dir, k)
    return Gpu(
        index=index,
        uuid=fake_uuid(key, index),
        model=model.product,
        memory_bytes=model.memory_bytes,
        vendor="amd" if model.vendor == "amd" else "intel",
        architecture=model.architecture,
        device_id=model.device_id,
        rocm_version="fake" if model.vendor == "amd" else None,
        render_path=render,
        card_path=card,
        driver_version="fake",
        device_path=render,
        minor=int(render.rsplit("renderD", 1)[1]),
        fake=True,
    )


def make_fake_gpus(spec: str, dev_dir: Path, *, cpus: int | None = None) -> tuple[list[Gpu], list[str]]:
    """Fake GPUs for ``spec`` with device nodes under ``dev_dir``.

    Returns the GPUs (index in spec order, across vendors) and the control device paths
    (``nvidiactl`` when there is an NVIDIA GPU, ``kfd`` when there is an AMD one).  Safe
    to call again: nodes that already have the right numbers are kept.  Each GPU gets a
    made-up PCI bus id; those of an entry with a topology word also get a NUMA node and
    the CPU affinity of their half of ``cpus`` (this host's CPU count when None).
    ``fake_links(spec)`` says how they are connected.
    """
    entries = parse_fake_entries(spec)
    places = entry_placements(entries, (os.cpu_count() or 1) if cpus is None else cpus)
    dev_dir.mkdir(parents=True, exist_ok=True)
    gpus: list[Gpu] = []
    nvidia = drm = 0
    for entry in entries:
        model = KNOWN_MODELS[entry.model]
        for _ in range(entry.count):
            index = len(gpus)
            if model.vendor == "nvidia":
                gpu = _nvidia(entry.model, model, entry, index, nvidia, dev_dir)
                nvidia += 1
            else:
                gpu = _drm(entry.model, model, index, drm, dev_dir)
                drm += 1
            place = places[index]
            gpus.append(
                gpu.model_copy(
                    update={
                        "pci_bus_id": place.pci_bus_id,
                        "numa_node": place.numa_node,
                        "cpu_affinity": place.cpu_affinity,
                    }
                )
            )
    control: list[str] = []
    if nvidia:
        ensure_device_node(dev_dir / "nvidiactl", NVIDIACTL_MINOR)
        control.append(str(dev_dir / "nvidiactl"))
    if any(g.vendor == "amd" for g in gpus):
        control.append(make_kfd(dev_dir))
    return gpus, control
