"""AMD and Intel GPU needs of a build, and ROCm compatibility: pure helpers of ``match``.

A ROCm build carries code objects for a list of gfx targets (a "fat binary", as
``--offload-arch=gfx90a --offload-arch=gfx942`` or ``PYTORCH_ROCM_ARCH`` make): it runs
on a GPU whose target is in the list, and on no other (a gfx90a code object does not
run on gfx942; unlike NVIDIA's PTX, there is no forward-compatible fallback).  Target
features after a colon (``gfx90a:xnack-``) are dropped: hetflow matches targets only.
An Intel build compiled ahead of time for device families (``ocloc -device pvc``,
``-fsycl-targets=intel_gpu_pvc``) runs on those families only; a SPIR-V build needs no
family and says only ``gpu:intel``.

ROCm: AMD's "User and kernel-space support matrix" promises that a ROCm user space (what
an image ships) works with the kernel driver (KFD/amdgpu, what the node runs) of up to
two releases older or newer.  So a build for ROCm X.Y fits a node whose ROCm release is
within two releases of X.Y in ``ROCM_RELEASES`` order (6.2 fits 6.0 through 6.4, not 5.7
or 7.0).  The node's ROCm version stands for its driver's release (the ROCm a host's
amdgpu driver shipped with).  Releases newer than the table continue its numbering.
"""

from __future__ import annotations

import re

__all__ = [
    "INTEL_FAMILIES",
    "ROCM_RELEASES",
    "ROCM_WINDOW",
    "check_rocm",
    "parse_gfx",
    "parse_intel",
    "rocm_distance",
    "vendor_feature",
]

# Minor releases of ROCm in order (patch releases share their minor's place).
ROCM_RELEASES: tuple[tuple[int, int], ...] = (
    *((5, m) for m in range(8)),
    *((6, m) for m in range(5)),
    *((7, m) for m in range(3)),
)
ROCM_WINDOW = 2  # releases of skew allowed each way
INTEL_FAMILIES = ("pvc", "dg2", "bmg")
_GFX = re.compile(r"gfx[0-9a-f]{3,4}\Z")


def _place(version: tuple[int, int]) -> int:
    if version in ROCM_RELEASES:
        return ROCM_RELEASES.index(version)
    last = ROCM_RELEASES[-1]
    if version > last:
        # Past the table: the rest of the last major continues it, later majors follow.
        if version[0] == last[0]:
            return len(ROCM_RELEASES) - 1 + version[1] - last[1]
        return len(ROCM_RELEASES) + 10 * (version[0] - last[0] - 1) + version[1]
    earlier = [i for i, r in enumerate(ROCM_RELEASES) if r <= version]
    return earlier[-1] if earlier else -10


def rocm_distance(build: tuple[int, int], node: tuple[int, int]) -> int:
    """How many ROCm releases apart two versions are: (6, 2) and (6, 4) -> 2; (5, 7) and
    (6, 0) -> 1."""
    return abs(_place(build) - _place(node))


def check_rocm(build: tuple[int, int], node: tuple[int, int]) -> str | None:
    """``None`` when a ROCm ``build`` user space runs on a ``node`` driver release, else why not."""
    gap = rocm_distance(build, node)
    if gap <= ROCM_WINDOW:
        return None
    side = "older" if node < build else "newer"
    return (
        f"rocm>={build[0]}.{build[1]} build runs on a ROCm driver at most {ROCM_WINDOW} releases apart; "
        f"node's ROCm {node[0]}.{node[1]} is {gap} releases {side}"
    )


def parse_gfx(text: str) -> tuple[str, ...] | None:
    """``"gfx90a+gfx942"`` / ``"gfx90a,gfx942:xnack-"`` -> ``("gfx90a", "gfx942")``;
    ``None`` when a part is not a gfx target."""
    parts = [p.strip().lower().split(":", 1)[0] for p in re.split(r"[+,; ]+", text) if p.strip()]
    if not parts or not all(_GFX.match(p) for p in parts):
        return None
    return tuple(sorted(set(parts)))


def parse_intel(text: str) -> tuple[str, ...] | None:
    """``"pvc+dg2"`` -> ``("dg2", "pvc")``; ``None`` when a part is not a known family."""
    parts = [p.strip().lower().removeprefix("intel_gpu_") for p in re.split(r"[+,; ]+", text) if p.strip()]
    if not parts or not all(p in INTEL_FAMILIES for p in parts):
        return None
    return tuple(sorted(set(parts)))


def vendor_feature(text: str) -> dict[str, object] | None:
    """The Requirements fields of one AMD/Intel/vendor feature, or ``None`` if it is not one:

    ``gpu:amd`` / ``gpu:intel``    a GPU of that vendor
    ``gpu:gfx90a+gfx942``          an AMD GPU of one of these targets (``gfx90a`` alone too)
    ``gpu:pvc``                    an Intel GPU of one of these families (``intel:pvc+dg2`` too)
    ``rocm>=6.2``                  a ROCm driver release compatible with a 6.2 user space
    """
    text = text.strip().lower()
    if text in ("gpu:amd", "amd", "gpu:intel", "intel"):
        return {"gpu_vendor": text.removeprefix("gpu:")}
    body = text.removeprefix("gpu:").removeprefix("amd:")
    if body.startswith("gfx") and (gfx := parse_gfx(body)) is not None:
        return {"gpu_vendor": "amd", "gfx": gfx}
    body = text.removeprefix("gpu:").removeprefix("intel:")
    if (families := parse_intel(body)) is not None:
        return {"gpu_vendor": "intel", "xe": families}
    if match := re.fullmatch(r"rocm\s*(?:>=|:|-)\s*(\d+)(?:\.(\d+))?(?:\.\d+)?", text):
        return {"gpu_vendor": "amd", "rocm": (int(match[1]), int(match[2] or 0))}
    return None
