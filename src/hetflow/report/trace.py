"""A run's trace: one row per attempt, after Nextflow's ``trace.txt``.

``trace_rows`` gives raw values (seconds, bytes, epoch times; None where unknown) for
``--json``; ``trace_tsv`` renders them as a tab-separated table with a header, in readable
units, ``-`` for unknown.  Field names follow Nextflow's where they mean the same:
``submit`` is when hetflow handed the attempt to the engine, ``start``/``end`` when the
container's process ran (the engine's own times, where it reports them), ``duration``
submit to end, ``realtime`` start to end, ``%cpu`` CPU time over realtime (unknown under
``PCT_MIN_REALTIME``: the cgroup's CPU time also holds the runtime's own start-up, which a
step of a few milliseconds turns into thousands of percent).  ``peak_rss`` is the peak of
the attempt's cgroup: resident memory plus the page cache it touched, what the kernel
would count against a memory limit.  ``gpu_util`` (mean) and ``gpu_util_max`` are NVML's
utilisation of the attempt's GPUs and ``gpu_mem_peak`` the most GPU memory its processes
held (``execute.devices.usage``; ``-`` where not sampled).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from hetflow.errors import UsageError
from hetflow.spec import format_bytes, format_duration, item_text
from hetflow.state import SUCCEEDED, AttemptRecord, StepRecord

TRACE_FIELDS: tuple[str, ...] = (
    "task_id",
    "step",
    "item",  # a fan-out item's values (JSON: as recorded; TSV: sample=a,lane=1); null/- for a step
    "attempt",
    "variant",
    "node",
    "gpus",
    "status",
    "exit",
    "submit",
    "start",
    "end",
    "duration",
    "realtime",
    "%cpu",
    "peak_rss",
    "cpu_time",
    "gpu_util",
    "gpu_util_max",
    "gpu_mem_peak",
    "cpus",
    "memory",
    "native_id",  # the engine's id of the job (Slurm job id, Ray task id, Kubernetes Job name)
    "image",
    "image_id",
    "container",
)
DEFAULT_TRACE_FIELDS: tuple[str, ...] = TRACE_FIELDS[:-2]


def check_trace_fields(fields: Iterable[str]) -> tuple[str, ...]:
    """``--fields step,peak_rss`` (repeatable, comma-separated) as a checked tuple."""
    out = tuple(f.strip() for item in fields for f in item.split(",") if f.strip())
    bad = [f for f in out if f not in TRACE_FIELDS]
    if bad:
        raise UsageError(f"--fields: unknown field(s) {', '.join(bad)}; choose from {', '.join(TRACE_FIELDS)}")
    return out or DEFAULT_TRACE_FIELDS


PCT_MIN_REALTIME = 1.0  # seconds


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, a - b)


CACHED = "cached"


def cached_steps(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """Steps whose result came from the cross-run cache (they have no attempt)."""
    return [s for s in steps if s.state == SUCCEEDED and s.attempts == 0 and s.reason.startswith("cached:")]


def trace_rows(
    attempts: Sequence[AttemptRecord], cached: Sequence[StepRecord] = (), items: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Raw values per attempt, in submit order; task_id numbers the attempts from 1.  A step
    taken from the cache is a row of its own with status ``cached`` and attempt 0, as
    Nextflow's trace lists CACHED tasks.  ``items``: fan-out items' values by step
    (``report.items.step_items``), each row's ``item``."""
    items = items or {}
    ordered = sorted(attempts, key=lambda a: (a.started is None, a.started or 0.0, a.step, a.attempt))
    rows: list[dict[str, Any]] = []
    for s in cached:
        row: dict[str, Any] = dict.fromkeys(TRACE_FIELDS)
        row.update(
            step=s.step,
            item=items.get(s.step),
            attempt=0,
            variant=s.variant,
            node=s.node,
            gpus=[],
            status=CACHED,
            exit=0,
        )
        row.update(submit=s.started, start=s.started, end=s.ended, duration=0.0, realtime=0.0)
        rows.append(row)
    for a in ordered:
        start = a.run_started
        end = a.run_ended if a.run_ended is not None else a.ended
        realtime = _minus(a.run_ended, a.run_started)
        measurable = realtime is not None and realtime >= PCT_MIN_REALTIME
        pct = 100.0 * a.cpu_seconds / realtime if a.cpu_seconds is not None and realtime and measurable else None
        rows.append(
            {
                "task_id": 0,
                "step": a.step,
                "item": items.get(a.step),
                "attempt": a.attempt,
                "variant": a.variant,
                "node": a.node,
                "gpus": list(a.gpus),
                "status": a.shown_state,  # "lost" for one lost with its node, as the docs call it
                "exit": a.exit_code,
                "submit": a.started,
                "start": start,
                "end": end,
                "duration": _minus(end, a.started),
                "realtime": realtime,
                "%cpu": pct,
                "peak_rss": a.peak_memory,
                "cpu_time": a.cpu_seconds,
                "gpu_util": a.gpu_util_mean,
                "gpu_util_max": a.gpu_util_max,
                "gpu_mem_peak": a.gpu_memory_peak,
                "cpus": a.cpus,
                "memory": a.memory,
                "image": a.image,
                "image_id": a.image_id,
                "container": a.container,
                "native_id": a.native_id,
            }
        )
    rows.sort(key=lambda r: (r["submit"] is None, r["submit"] or 0.0, r["step"], r["attempt"]))
    for i, row in enumerate(rows, start=1):
        row["task_id"] = i
    return rows


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def cell(field: str, value: Any) -> str:
    """One value as the TSV (and the HTML report) shows it; ``-`` for unknown."""
    if value is None:
        return "-"
    if field in ("submit", "start", "end"):
        return _clock(float(value))
    if field in ("duration", "realtime", "cpu_time"):
        return format_duration(float(value))
    if field in ("%cpu", "gpu_util", "gpu_util_max"):
        return f"{float(value):.1f}%"
    if field in ("peak_rss", "memory", "gpu_mem_peak"):
        return format_bytes(int(value))
    if field == "cpus":
        return f"{float(value):g}"
    if field == "gpus":
        return ",".join(map(str, value)) or "-"
    if field == "item":
        value = item_text(value)
    # Tabs and newlines would break the table's columns.
    return " ".join(str(value).split())


def trace_tsv(rows: Sequence[dict[str, Any]], fields: Sequence[str] = DEFAULT_TRACE_FIELDS) -> str:
    lines = ["\t".join(fields)]
    lines += ["\t".join(cell(f, row[f]) for f in fields) for row in rows]
    return "\n".join(lines) + "\n"


def trace_json(rows: Sequence[dict[str, Any]], fields: Sequence[str] = TRACE_FIELDS) -> list[dict[str, Any]]:
    return [{f: row[f] for f in fields} for row in rows]
