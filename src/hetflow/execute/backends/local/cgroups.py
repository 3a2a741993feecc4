"""What one attempt used (peak memory, CPU time), read from a cgroup hetflow gives it.

Each podman attempt runs under its own parent cgroup, ``/hetflow/<container name>``
(``podman run --cgroup-parent``, with ``--cgroups=no-conmon`` so podman's monitor and
its exit-time cleanup process are not charged to the step: measured here, they add
about 11 MB and 0.1 s to every attempt).  The runtime removes the container's own cgroup
when it exits, but the parent's counters are hierarchical and stay until hetflow removes
the parent, so they can be read after the exit:

- cgroup v1 (and the hybrid layout): ``memory.max_usage_in_bytes`` of the memory
  hierarchy and ``cpuacct.usage`` (nanoseconds, user+system) of the cpuacct hierarchy
  (kernel docs, cgroup-v1/memory.rst and cgroup-v1/cpuacct.rst);
- cgroup v2: ``memory.peak`` (kernel 5.19 and later) and ``usage_usec`` in ``cpu.stat``
  (kernel docs, admin-guide/cgroup-v2.rst).

Both peaks count what the kernel charged to the cgroup: anonymous memory and the page
cache the step's processes touched, plus the runtime's init process (about 4 MB here).
A figure that cannot be read is ``None`` ("unknown"), never a guess.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hetflow.execute.engine import CGROUP_PARENT as PARENT

T = TypeVar("T")
MOUNTS = Path("/proc/self/mounts")


@dataclass(frozen=True)
class CgroupLayout:
    """Where the counters live: v1 names one hierarchy per controller, v2 one tree."""

    version: int  # 1 (v1 or hybrid: v1 controllers) or 2 (unified)
    memory: Path  # the memory hierarchy's root (v2: the unified root)
    cpu: Path  # the cpuacct hierarchy's root (v2: the unified root)
    roots: tuple[Path, ...]  # every hierarchy the runtime creates the parent in (for removal)


@dataclass(frozen=True)
class CgroupUsage:
    peak_memory: int | None = None  # bytes
    cpu_seconds: float | None = None  # user + system
    oom_kills: int | None = None  # processes the OOM killer ended (v1 memory.oom_control, v2 memory.events)


def parse_mounts(text: str) -> CgroupLayout | None:
    """The layout from ``/proc/self/mounts`` text; None without a usable memory controller.

    A hybrid system mounts v1 controllers and an empty v2 tree (``/sys/fs/cgroup/unified``):
    the v1 ``memory`` and ``cpuacct`` hierarchies are the ones that count there."""
    v1: dict[str, Path] = {}
    v1_roots: list[Path] = []
    unified: Path | None = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        mount_point, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
        if fstype == "cgroup":
            v1_roots.append(mount_point)
            for controller in ("memory", "cpuacct"):
                if controller in options:
                    v1[controller] = mount_point
        elif fstype == "cgroup2":
            unified = mount_point
    if "memory" in v1 and "cpuacct" in v1:
        roots = tuple(v1_roots) + ((unified,) if unified is not None else ())
        return CgroupLayout(1, v1["memory"], v1["cpuacct"], roots)
    if unified is not None and not v1:
        return CgroupLayout(2, unified, unified, (unified,))
    return None


def parse_int(text: str) -> int | None:
    """A counter file holding one integer (``memory.peak``, ``memory.max_usage_in_bytes``)."""
    value = text.strip()
    return int(value) if value.isdigit() else None


def parse_cpuacct_usage(text: str) -> float | None:
    """v1 ``cpuacct.usage``: nanoseconds of CPU, user and system together."""
    ns = parse_int(text)
    return None if ns is None else ns / 1e9


def parse_cpu_stat(text: str) -> float | None:
    """v2 ``cpu.stat``: the ``usage_usec`` line (user + system), in seconds."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec" and value.strip().isdigit():
            return int(value) / 1e6
    return None


def parse_oom_kills(text: str) -> int | None:
    """The ``oom_kill N`` line of v1 ``memory.oom_control`` or v2 ``memory.events`` (kernel
    docs: cgroup-v1/memory.rst, admin-guide/cgroup-v2.rst; v2 counts the subtree, v1 only
    kills in the cgroup itself, so the parent's v1 count stays 0 and the peak tells)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def parent_path(container: str) -> str:
    """The attempt's parent cgroup, as podman's ``--cgroup-parent`` takes it."""
    return f"/{PARENT}/{container}"


def detect(mounts: Path = MOUNTS) -> CgroupLayout | None:
    try:
        return parse_mounts(mounts.read_text())
    except OSError:
        return None


def prepare(layout: CgroupLayout, container: str) -> bool:
    """Make the attempt's parent cgroup ready; False where this process may not (rootless
    podman, a read-only cgroup file system): the attempt then runs unmeasured.

    v1: runc creates the path in every hierarchy itself.  v2: a child only has the memory
    and cpu files when its parent enables those controllers, so enable them on the way."""
    if not os.access(layout.memory, os.W_OK):
        return False
    if layout.version == 1:
        return True
    try:
        top = layout.memory / PARENT
        top.mkdir(exist_ok=True)
        _enable(layout.memory)
        _enable(top)
        (top / container).mkdir(exist_ok=True)
    except OSError:
        return False
    return True


def _enable(cgroup: Path) -> None:
    wanted = {"memory", "cpu"} & set((cgroup / "cgroup.controllers").read_text().split())
    if wanted:
        (cgroup / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(wanted)))


def read_usage(layout: CgroupLayout, container: str) -> CgroupUsage:
    """The parent cgroup's peak memory and CPU time; None for what is not there."""
    rel = parent_path(container).lstrip("/")
    if layout.version == 1:
        peak = _read(layout.memory / rel / "memory.max_usage_in_bytes", parse_int)
        cpu = _read(layout.cpu / rel / "cpuacct.usage", parse_cpuacct_usage)
        ooms = _read(layout.memory / rel / "memory.oom_control", parse_oom_kills)
    else:
        peak = _read(layout.memory / rel / "memory.peak", parse_int)
        cpu = _read(layout.cpu / rel / "cpu.stat", parse_cpu_stat)
        ooms = _read(layout.memory / rel / "memory.events", parse_oom_kills)
    return CgroupUsage(peak, cpu, ooms)


def _read(path: Path, parse: Callable[[str], T | None]) -> T | None:
    try:
        return parse(path.read_text())
    except OSError:
        return None


def remove(layout: CgroupLayout, container: str) -> None:
    """Remove the attempt's parent cgroup from every hierarchy, children first (rmdir of a
    cgroup without processes; its memory charges move to the parent in v1).  A cgroup
    still busy stays: it is named after the container and removed with the next one."""
    rel = parent_path(container).lstrip("/")
    for root in layout.roots:
        top = root / rel
        if not top.is_dir():
            continue
        dirs = [Path(d) for d, _, _ in os.walk(top)]
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
