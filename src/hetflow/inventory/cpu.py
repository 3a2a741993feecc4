"""CPU and memory probes: what ``/proc/cpuinfo``, ``/proc/meminfo`` and cgroups say.

The microarchitecture name comes from archspec (the library Spack uses), so that
hetflow and Spack-built images agree on names such as ``skylake_avx512`` or ``zen3``.

Both probes read the live host when given nothing, and depend only on their
arguments when given text, so tests feed them sample files.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import archspec.cpu
from archspec.cpu import detect
from archspec.cpu.schema import TARGETS_JSON

from hetflow.errors import InventoryError
from hetflow.inventory.models import Cpu

# The x86-64 psABI levels archspec models as generic targets, highest first.
# Level 1 (plain x86_64) is what every x86-64 CPU meets, so it is the fallback.
_X86_64_LEVELS = (("x86_64_v4", 4), ("x86_64_v3", 3), ("x86_64_v2", 2))

# cgroup files that cap the memory a process may use: v2 first, then v1.  Inside a
# container with its own cgroup namespace (where hetflow usually runs) the container's
# cgroup is the root of /sys/fs/cgroup, so the root files are the ones that apply.
_CGROUP_LIMIT_FILES = ("memory.max", "memory/memory.limit_in_bytes")

# cgroup v1 says "no limit" with PAGE_COUNTER_MAX pages (9223372036854771712 on 4 KiB
# pages); anything this large is no limit at all.
_NO_LIMIT = 1 << 60


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` pairs from ``/proc/cpuinfo`` text.

    Every processor repeats the same model and flags, so the first block is enough
    (archspec's own ``proc_cpuinfo`` reads the same way).
    """
    data: dict[str, str] = {}
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if not separator:
            if data:
                break  # a blank line ends the first processor's block
            continue
        data[key.strip()] = value.strip()
    return data


def cpuinfo_architecture(data: dict[str, str]) -> str:
    """The machine architecture that wrote this cpuinfo, judged by its keys.

    Sample text may come from another machine than the one running hetflow, so
    ``platform.machine()`` is only the last resort.
    """
    if "vendor_id" in data and "flags" in data:
        return "x86_64"
    if "CPU implementer" in data or "Features" in data:
        return "aarch64"
    if data.get("cpu", "").startswith("POWER"):
        return "ppc64le"
    if "isa" in data and data["isa"].startswith("rv64"):
        return "riscv64"
    return platform.machine()


def _aarch64_vendor(data: dict[str, str]) -> str:
    # aarch64 names its vendor by a code ("CPU implementer: 0x41" is ARM); archspec
    # ships the table of codes it matches targets against, so use the same names.
    code = data.get("CPU implementer")
    if code is None:
        return "generic"
    return str(TARGETS_JSON["conversions"]["arm_vendors"].get(code, code))


def _partial_uarch(data: dict[str, str], architecture: str) -> Any:
    """archspec's partial microarchitecture for this cpuinfo, built the way
    ``archspec.cpu.detect.proc_cpuinfo`` builds it from the live file."""
    if architecture == "x86_64":
        return detect.partial_uarch(
            vendor=data.get("vendor_id", "generic"), features=set(data.get("flags", "").split())
        )
    if architecture == "aarch64":
        return detect.partial_uarch(
            vendor=_aarch64_vendor(data),
            features=set(data.get("Features", "").split()),
            cpu_part=data.get("CPU part", ""),
        )
    return None


def detect_microarchitecture(data: dict[str, str], architecture: str) -> Any:
    """The archspec target that best matches parsed cpuinfo of ``architecture``.

    This repeats the selection in ``archspec.cpu.detect.host`` (archspec 0.2.x), which
    cannot be used directly: it reads the live /proc/cpuinfo and picks its compatibility
    check by the *running* machine, while the text here may come from an aarch64 box.
    x86-64 and aarch64 are detected in full; other families (POWER, RISC-V) get their
    generic family target, because archspec's checks for them consult the running machine.
    """
    targets = archspec.cpu.TARGETS
    info = _partial_uarch(data, architecture)
    check = detect.COMPATIBILITY_CHECKS.get(architecture)
    if info is None or check is None:
        return targets.get(architecture) or detect.generic_microarchitecture(architecture)

    candidates = [t for t in targets.values() if check(info, t)]
    if not candidates:
        return targets[architecture]

    def depth(target: Any) -> tuple[int, int]:
        return len(target.ancestors), len(target.features)

    best_generic = max((c for c in candidates if c.vendor == "generic"), key=depth)
    # aarch64 cores name themselves by "CPU part"; trust it when a target matches.
    if info.cpu_part and any(c.cpu_part == info.cpu_part for c in candidates):
        candidates = [c for c in candidates if c.cpu_part == info.cpu_part]
    # Only descendants of the best generic level: a niche flag switched off in the
    # BIOS should not drag the answer down to an old microarchitecture.
    candidates = [c for c in candidates if c > best_generic]
    return max(candidates, key=depth) if candidates else best_generic


def x86_64_level(uarch: Any) -> int | None:
    """The highest x86-64 psABI level (1-4) ``uarch`` meets; None off x86-64."""
    targets = archspec.cpu.TARGETS
    if str(uarch.family) != "x86_64":
        return None
    for name, level in _X86_64_LEVELS:
        if uarch == targets[name] or targets[name] in uarch.ancestors:
            return level
    return 1


def _model_name(data: dict[str, str], vendor: str, uarch_name: str) -> str:
    # x86 says "model name"; POWER says "cpu"; RISC-V may say "uarch".  aarch64 kernels
    # print no name at all (lscpu keeps its own table of part numbers), so fall back
    # to the vendor plus archspec's name, e.g. "ARM neoverse_n1".
    for key in ("model name", "cpu", "uarch"):
        if data.get(key):
            return data[key]
    return f"{vendor} {uarch_name}".strip()


def _vendor(data: dict[str, str], architecture: str, uarch: Any) -> str:
    if architecture == "x86_64" and data.get("vendor_id"):
        return data["vendor_id"]
    if architecture == "aarch64":
        return _aarch64_vendor(data)
    return str(uarch.vendor)


def probe_cpu(cpuinfo: str | None = None, cores: int | None = None) -> Cpu:
    """Describe a CPU from ``/proc/cpuinfo`` text (the live file when None).

    ``cores`` defaults to the CPUs this process may run on (``sched_getaffinity``),
    which inside a container is the cpuset it was given, not the host's count.
    """
    live = cpuinfo is None
    if cpuinfo is None:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    data = parse_cpuinfo(cpuinfo)
    if live:
        architecture = platform.machine()
        uarch = archspec.cpu.host()
    else:
        architecture = cpuinfo_architecture(data)
        uarch = detect_microarchitecture(data, architecture)
    features = data.get("flags") or data.get("Features") or ""
    vendor = _vendor(data, architecture, uarch)
    return Cpu(
        vendor=vendor,
        model=_model_name(data, vendor, str(uarch.name)),
        architecture=architecture,
        microarchitecture=str(uarch.name),
        x86_64_level=x86_64_level(uarch),
        cores=cores if cores is not None else len(os.sched_getaffinity(0)),
        features=tuple(sorted(set(features.split()))),
    )


def parse_meminfo(text: str) -> int:
    """MemTotal from ``/proc/meminfo`` text, in bytes (the file says kB, meaning KiB)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "MemTotal":
            number, _, unit = value.strip().partition(" ")
            factor = 1024 if unit.strip().lower() == "kb" else 1
            return int(number) * factor
    raise InventoryError("/proc/meminfo has no MemTotal line; is /proc mounted?")


def cgroup_memory_limit(cgroup_root: Path) -> int | None:
    """The cgroup memory limit in bytes under ``cgroup_root``, or None when unlimited."""
    for name in _CGROUP_LIMIT_FILES:
        try:
            text = (cgroup_root / name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text == "max":  # cgroup v2's word for "no limit"
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < _NO_LIMIT else None
    return None


def probe_memory(meminfo: str | None = None, *, cgroup_root: Path | None = None) -> int:
    """Usable memory in bytes: MemTotal, or the cgroup limit when that is smaller.

    With no arguments this reads the live ``/proc/meminfo`` and ``/sys/fs/cgroup``.
    Given ``meminfo`` text, cgroups are consulted only when ``cgroup_root`` is given,
    so the answer depends on the arguments alone.
    """
    if meminfo is None:
        meminfo = Path("/proc/meminfo").read_text(encoding="ascii", errors="replace")
        if cgroup_root is None:
            cgroup_root = Path("/sys/fs/cgroup")
    total = parse_meminfo(meminfo)
    limit = cgroup_memory_limit(cgroup_root) if cgroup_root is not None else None
    return min(total, limit) if limit is not None else total
