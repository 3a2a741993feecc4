"""Quantities as Kubernetes and Slurm users write them: memory and durations."""

from __future__ import annotations

import re

_MEM_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}
_MEM_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]i?)?[bB]?\s*$")
_DUR_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_DUR_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_memory(value: object) -> int:
    """Bytes from ``4096``, ``512Mi``, ``1Gi``, ``2G`` (Kubernetes quantity suffixes).

    Raises ValueError with the accepted forms when the value is malformed."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a memory size; write e.g. 512Mi or 2Gi")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"memory must not be negative, got {value}")
        return int(value)
    m = _MEM_RE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a memory size; write e.g. 512Mi, 2Gi or 4096 (bytes)")
    unit = (m.group(2) or "").lower()
    return int(float(m.group(1)) * _MEM_UNITS[unit])


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``20s``, ``4m``, ``1h30m``, ``250ms``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write e.g. 20s, 4m or 1h30m")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration must not be negative, got {value}")
        return float(value)
    text = str(value).strip()
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
