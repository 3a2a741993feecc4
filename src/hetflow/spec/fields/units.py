"""Quantities as Kubernetes and Slurm users write them: memory and durations."""

from __future__ import annotations

import functools
import math
import re

_MEM_UNITS = {
    "": 1,
    # Kubernetes quantities: decimal K/M/G/T (and k), binary Ki/Mi/Gi/Ti.
    "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
    "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4,
    # Docker's `--memory 512m`: lowercase m/g/t are binary.
    "m": 1024**2, "g": 1024**3, "t": 1024**4,
}  # fmt: skip
_MEM_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT][iI]?)?[bB]?\s*$")
_DUR_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_DUR_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_memory(value: object) -> int:
    """Bytes from ``4096``, ``512Mi``, ``1Gi``, ``2G`` (Kubernetes quantities) or ``512m``
    (Docker's binary shorthand).

    Raises ValueError with the accepted forms when the value is malformed."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a memory size; write e.g. 512Mi or 2Gi")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"memory must be a finite, non-negative size, got {value}")
        return int(value)
    return _parse_memory_text(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_memory_text(value: str) -> int:
    m = _MEM_RE.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a memory size; write e.g. 512Mi, 2Gi or 4096 (bytes)")
    unit = m.group(2) or ""
    if len(unit) == 2:
        unit = unit[0].upper() + "i"  # 512mi, 2GI: binary whatever the case
    return int(float(m.group(1)) * _MEM_UNITS[unit])


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``20s``, ``4m``, ``1h30m``, ``250ms``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write e.g. 20s, 4m or 1h30m")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"a duration must be finite and non-negative, got {value}")
        return float(value)
    return _parse_duration_text(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_duration_text(value: str) -> float:
    """(Cached: a big workflow writes the same few durations thousands of times.)"""
    text = value.strip()
    parts = _DUR_RE.findall(text)
    if not parts or _DUR_RE.sub("", text).strip():
        raise ValueError(f"{value!r} is not a duration; write e.g. 20s, 4m or 1h30m")
    return sum(float(n) * _DUR_UNITS[u] for n, u in parts)


def format_bytes(n: int) -> str:
    """Binary units, as nvidia-smi and docker info print them."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def compute_capability(value: object, examples: str = '"7.0" or "8.6"') -> str:
    """A CUDA compute capability as "major.minor" ("8" -> "8.0"); ValueError naming
    ``examples`` for anything else.  One check for workflows and cluster files."""
    text = str(value)
    if not re.fullmatch(r"\d+(\.\d+)?", text):
        raise ValueError(f"{value!r} is not a compute capability; write e.g. {examples}")
    return text if "." in text else text + ".0"


def cc_tuple(capability: str) -> tuple[int, int]:
    """ "8.6" -> (8, 6), for comparing compute capabilities."""
    major, _, minor = capability.partition(".")
    return int(major), int(minor or 0)
