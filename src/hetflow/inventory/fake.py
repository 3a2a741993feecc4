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
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from hetflow.errors import InventoryError
from hetflow.inventory.gpumodels import KNOWN_MODELS
from hetflow.inventory.models import Gpu, GpuLink

ENV_VAR = "HETFLOW_FAKE_GPUS"

# The NVIDIA driver's character-device numbers (devices.txt lists 195 as
# "Nvidia graphics devices"; minor 255 is nvidiactl).
NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255

# os.mknod's shape: (path, mode, device) -> None.
MknodFn = Callable[[Path, int, int], None]


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
    """One entry of ``HETFLOW_FAKE_GPUS``: ``model[:count[:topology]]``."""

    model: str
    count: int
    topology: str | None = None  # one of TOPOLOGIES; None: links unknown


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
        name, _, rest = entry.partition(":")
        count_text, _, topology_text = rest.partition(":")
        model = name.strip().lower()
        if model not in KNOWN_MODELS:
            raise InventoryError(f"{ENV_VAR}: {entry!r} names no known model; use one of {_known()}")
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
        entries.append(FakeEntry(model, int(count_text), topology_text or None))
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


def _is_device(path: Path, minor: int) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(NVIDIA_MAJOR, minor)


def ensure_device_node(path: Path, minor: int, *, mknod: MknodFn = os.mknod) -> None:
    """Make ``path`` a character device 195:``minor``, keeping a correct one as it is.

    ``mknod`` is the seam tests use to play an unprivileged user.
    """
    if _is_device(path, minor):
        return
    if path.is_dir() and not path.is_symlink():
        raise InventoryError(f"{path} is a directory; remove it so a fake GPU node can go there")
    path.unlink(missing_ok=True)  # wrong numbers, a plain file or a stale link
    try:
        mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
    except PermissionError as err:
        # EPERM: not root, or root in a user namespace (rootless podman), where the
        # kernel refuses device nodes whatever the capabilities say.
        raise InventoryError(
            f"fake GPUs need root (CAP_MKNOD) to create device node {path}: {err.strerror}; "
            f"run as root or unset {ENV_VAR}"
        ) from err
    except OSError as err:
        raise InventoryError(f"cannot create fake GPU node {path}: {err}") from err
    # mknod applies the umask; containers open these read-write, as with real nodes.
    os.chmod(path, 0o666)


def make_fake_gpus(spec: str, dev_dir: Path, *, cpus: int | None = None) -> tuple[list[Gpu], list[str]]:
    """Fake GPUs for ``spec`` with device nodes under ``dev_dir``.

    Returns the GPUs (index and minor in spec order) and the control device paths.
    Safe to call again: nodes that already have the right numbers are kept.  Each GPU
    gets a made-up PCI bus id; those of an entry with a topology word also get a NUMA
    node and the CPU affinity of their half of ``cpus`` (this host's CPU count when
    None).  ``fake_links(spec)`` says how they are connected.
    """
    entries = parse_fake_entries(spec)
    places = entry_placements(entries, (os.cpu_count() or 1) if cpus is None else cpus)
    dev_dir.mkdir(parents=True, exist_ok=True)
    gpus: list[Gpu] = []
    for entry in entries:
        model = KNOWN_MODELS[entry.model]
        for _ in range(entry.count):
            index = len(gpus)
            place = places[index]
            path = dev_dir / f"nvidia{index}"
            ensure_device_node(path, index)
            gpus.append(
                Gpu(
                    index=index,
                    uuid=fake_uuid(entry.model, index),
                    model=model.product,
                    memory_bytes=model.memory_bytes,
                    compute_capability=model.compute_capability,
                    driver_version="fake",
                    device_path=str(path),
                    minor=index,
                    fake=True,
                    pci_bus_id=place.pci_bus_id,
                    numa_node=place.numa_node,
                    cpu_affinity=place.cpu_affinity,
                )
            )
    control = dev_dir / "nvidiactl"
    if gpus:
        ensure_device_node(control, NVIDIACTL_MINOR)
    return gpus, [str(control)] if gpus else []
