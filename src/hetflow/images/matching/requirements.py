"""What one build of a multi-build image needs of a node, and how those needs are spelled.

``Requirements`` is the value ``match`` reads from an index entry and ``nodecheck`` judges
against a node; the spelling helpers are shared by both (and by ``index_build`` through
``match``): architecture names (GOARCH vs ``uname -m``), archspec targets, versions and
CUDA ``sm_XY`` names.  Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import archspec.cpu

__all__ = [
    "Requirements",
    "archspec_target",
    "normalize_arch",
    "parse_version",
    "sm_name",
    "version_text",
]

# Go's GOARCH names, which images use, for the kernel's `uname -m` names, which nodes use.
_ARCH_ALIASES = {
    "x86_64": "amd64", "x86-64": "amd64", "x64": "amd64", "amd64": "amd64",
    "aarch64": "arm64", "arm64": "arm64", "armv8": "arm64",
    "i386": "386", "i686": "386", "386": "386",
    "ppc64le": "ppc64le", "powerpc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}  # fmt: skip


def normalize_arch(name: str) -> str:
    """GOARCH spelling of an architecture: ``x86_64`` -> ``amd64``, ``aarch64`` -> ``arm64``."""
    key = name.strip().lower()
    return _ARCH_ALIASES.get(key, key)


def archspec_target(name: str) -> Any:
    """archspec's ``Microarchitecture`` of that name, or None when archspec does not know it."""
    return archspec.cpu.TARGETS.get(name)


def parse_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of the version a text starts with (``"12.2.1"`` -> (12, 2)), else None."""
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", text)
    return (int(match[1]), int(match[2] or 0)) if match else None


def version_text(version: tuple[int, int]) -> str:
    """``(12, 2)`` -> ``"12.2"``."""
    return f"{version[0]}.{version[1]}"


def sm_name(cc: tuple[int, int], exact: bool = False) -> str:
    """The CUDA architecture name of a compute capability: ``(9, 0)`` -> ``sm_90``, exact ``sm_90a``."""
    return f"sm_{cc[0]}{cc[1]}{'a' if exact else ''}"


def _depth(name: str) -> int:
    """How far down archspec's tree a target is: 0 for a family root (x86_64)."""
    target = archspec_target(name)
    return len(target.ancestors) if target is not None else 0


@dataclass(frozen=True)
class Requirements:
    """What one build needs of a node.  Empty fields need nothing.

    ``unknown`` holds features and values hetflow cannot check, and ``not_image`` says
    why an entry is not a runnable image at all (an attestation, a nested index);
    either rejects the entry."""

    os: str | None = None
    architecture: str | None = None  # GOARCH spelling (amd64, arm64)
    microarchitecture: str | None = None  # an archspec target name
    x86_64_level: int | None = None  # 2..4; 1 needs nothing beyond amd64
    gpu: bool = False  # any GPU (implied by gpu_sm and cuda)
    gpu_sm: tuple[int, int] | None = None  # minimum compute capability (major, minor)
    gpu_sm_exact: bool = False  # sm_90a: arch-specific code runs only on exactly that capability
    cuda: tuple[int, int] | None = None  # minimum CUDA version the driver must support
    gpu_vendor: str | None = None  # "nvidia" | "amd" | "intel": a GPU of that vendor
    gfx: tuple[str, ...] = ()  # AMD gfx targets the build has code for (any one fits)
    xe: tuple[str, ...] = ()  # Intel families the build was compiled for (any one fits)
    rocm: tuple[int, int] | None = None  # ROCm user-space version (driver within 2 releases)
    unknown: tuple[str, ...] = ()
    not_image: str | None = None

    @property
    def needs_gpu(self) -> bool:
        return (
            self.gpu
            or self.gpu_sm is not None
            or self.cuda is not None
            or self.gpu_vendor is not None
            or bool(self.gfx or self.xe)
            or self.rocm is not None
        )

    @property
    def generic(self) -> bool:
        """True when the build asks nothing of the CPU or GPU beyond os/architecture."""
        return not (
            self.microarchitecture or (self.x86_64_level or 1) > 1 or self.needs_gpu or self.unknown or self.not_image
        )

    def labels(self) -> list[str]:
        """The requirements as feature strings, in a fixed order (see ``features_for``)."""
        out = []
        if self.microarchitecture:
            out.append(f"cpu:{self.microarchitecture}")
        if self.x86_64_level and self.x86_64_level > 1:
            out.append(f"x86-64-v{self.x86_64_level}")
        if self.gpu_sm is not None:
            out.append(f"gpu:{sm_name(self.gpu_sm, self.gpu_sm_exact)}")
        elif self.gpu and self.cuda is None and self.gpu_vendor is None:
            out.append("gpu")
        if self.cuda is not None:
            out.append(f"cuda>={version_text(self.cuda)}")
        if self.gfx:
            out.append(f"gpu:{'+'.join(self.gfx)}")
        if self.xe:
            out.append(f"gpu:{'+'.join(self.xe)}")
        if self.rocm is not None:
            out.append(f"rocm>={version_text(self.rocm)}")
        if self.gpu_vendor in ("amd", "intel") and not (self.gfx or self.xe or self.rocm):
            out.append(f"gpu:{self.gpu_vendor}")
        return out

    def specificity(self) -> tuple[int, ...]:
        """The ranking key among compatible builds, highest first: a GPU build, then
        the higher sm (an AMD or Intel build for named targets counts 1), the newer CUDA
        or ROCm, the deeper CPU target (archspec ancestors; a level counts as its
        x86_64_vN target), and last a named architecture."""
        cpu = _depth(self.microarchitecture) + 1 if self.microarchitecture else 0
        if self.x86_64_level and self.x86_64_level > 1:
            cpu = max(cpu, _depth(f"x86_64_v{self.x86_64_level}") + 1)
        sm = self.gpu_sm[0] * 10 + self.gpu_sm[1] if self.gpu_sm else int(bool(self.gfx or self.xe))
        toolkit = self.cuda or self.rocm
        cuda = toolkit[0] * 100 + toolkit[1] if toolkit else 0
        return (int(self.needs_gpu), sm, cuda, cpu, int(self.architecture is not None))
