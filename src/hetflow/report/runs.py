"""Runs and steps as tables (people) and JSON (scripts): ps, show, the run summary."""

from __future__ import annotations

import pwd
import time
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from rich.table import Table
from rich.text import Text

from hetflow.report.items import item_label
from hetflow.report.tables import BIG, PlainTable, plain_table
from hetflow.spec import format_duration
from hetflow.state import QUEUED, AttemptRecord, ParamRecord, RunRecord, StepRecord

STATE_STYLE = {
    "pending": "dim",
    "waiting": "yellow",
    "launching": "cyan",
    "queued": "blue",
    "running": "cyan bold",
    "succeeded": "green",
    "failed": "red bold",
    "skipped": "magenta",
    "stopped": "red",
}


def styled(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def elapsed(start: float | None, end: float | None, now: float | None = None) -> str:
    if start is None:
        return "-"
    return format_duration((end if end is not None else (now or time.time())) - start)


def when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def gpus_text(gpus: Sequence[int | str]) -> str:
    """GPU indices (``0,1``), or what a cluster engine named (``2x nvidia.com/gpu``); ``-``: none."""
    return ",".join(map(str, gpus)) if gpus else "-"


EXECUTOR_GONE = "executor gone: resume or stop"


def run_state_text(run: RunRecord, gone: bool) -> str:
    """The run's state as people read it: a running run whose executor died says so."""
    return f"{run.state} ({EXECUTOR_GONE})" if gone else run.state


def attempt_json(a: AttemptRecord) -> dict[str, Any]:
    """One attempt in ``show --json`` and the dashboard."""
    return {
        "attempt": a.attempt,
        "variant": a.variant,
        "node": a.node,
        "gpus": list(a.gpus),
        "gpu_uuids": list(a.gpu_uuids),
        "container": a.container,
        "native_id": a.native_id,  # the engine's own id: Slurm job id, Ray task id, Kubernetes Job
        "image": a.image,
        "state": a.state,
        "lost": a.lost,  # lost with its node (state "failed"; trace shows "lost")
        "exit_code": a.exit_code,
        "started": a.started,
        "ended": a.ended,
        "message": a.message,
        # what it asked (a retry policy may have grown it) and what it used at most
        "cpus": a.cpus,
        "memory": a.memory,
        "peak_memory": a.peak_memory,
        "cpu_seconds": a.cpu_seconds,
        # the container's (a cluster job's) own start and end, as its engine or node saw them;
        # "started" above is when it was handed to the engine
        "run_started": a.run_started,
        "run_ended": a.run_ended,
        # its own seconds: the container's run where the engine said, else handed over to ended
        "elapsed": _span(a.run_started, a.run_ended) if a.run_ended is not None else _span(a.started, a.ended),
        # what its GPUs did, sampled from NVML (percent; bytes; "process" when the
        # memory is the attempt's own, "device" when it is all that was on its GPUs)
        "gpu_util_mean": a.gpu_util_mean,
        "gpu_util_max": a.gpu_util_max,
        "gpu_memory_peak": a.gpu_memory_peak,
        "gpu_memory_of": a.gpu_memory_of,
        # the version of the run's workflow it ran (a resume applying an edit adds one);
        # None: recorded by a hetflow that did not track it
        "workflow_version": a.workflow_version,
    }


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def run_json(
    run: RunRecord,
    steps: list[StepRecord],
    attempts: list[AttemptRecord] | None = None,
    *,
    executor_gone: bool = False,
    items: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``items``: fan-out items' values by step (``report.items.step_items``)."""
    items = items or {}
    by_step: dict[str, list[dict[str, Any]]] = {}
    for a in attempts or []:
        by_step.setdefault(a.step, []).append(attempt_json(a))
    done = sum(s.state == "succeeded" for s in steps)
    return {
        "id": run.id,
        "name": run.name,
        "workflow": run.workflow_file,
        "state": run.state,
        "created": run.created,
        "started": run.started,
        "ended": run.ended,
        "pid": run.pid,
        "executor_gone": executor_gone,  # state says running, yet no executor can progress it
        "user": f"{run.uid}:{run.gid}",
        "user_name": user_name(run.uid),  # as ps shows it (the uid where this machine has no such user)
        "workdir": run.workdir,
        "message": run.message,
        "steps_done": done,
        "steps_total": len(steps),
        "steps": [
            {
                "step": s.step,
                "item": items.get(s.step),  # a fan-out item's values (None: not an item)
                "item_label": item_label(items[s.step]) if s.step in items else None,
                "state": s.state,
                "queued": s.shown_state == QUEUED,  # handed to the engine, which has not started it
                "variant": s.variant,
                "node": s.node,
                "gpus": list(s.gpus),
                "attempts": s.attempts,
                "exit_code": s.exit_code,
                "started": s.started,
                "ended": s.ended,
                "reason": s.reason,
                **({"attempt_history": by_step.get(s.step, [])} if attempts is not None else {}),
            }
            for s in steps
        ],
    }


def params_json(params: Sequence[ParamRecord]) -> dict[str, dict[str, Any]]:
    """``show --json``'s "params": {name: {"value": ..., "from": ...}} (``ParamRecord.source``)."""
    return {p.name: {"value": p.value, "from": p.source} for p in params}


def param_text(value: object) -> str:
    """A param's value as written in YAML: ``true``, ``0.1``, ``[a, b]``, a string as it is."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(param_text, value)) + "]"
    return str(value)


def params_table(params: Sequence[ParamRecord]) -> Table:
    """``show``'s params: name, effective value, and where it was written."""
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("PARAM", "VALUE", "FROM"):
        t.add_column(col, overflow="fold")
    for p in params:
        t.add_row(Text(p.name), Text(param_text(p.value)), Text(p.source))  # Text: '[a, b]' is no markup
    return t


def ps_table(runs: list[tuple[RunRecord, list[StepRecord]]], gone: frozenset[str] = frozenset()) -> Table:
    """``gone``: ids of runs whose executor is gone (``state.executor_gone``)."""
    t = Table(box=None, header_style="bold")
    for col in ("RUN ID", "NAME", "STATE", "STEPS", "CREATED", "DURATION", "USER"):
        t.add_column(col)
    for run, steps in runs:
        done = sum(s.state == "succeeded" for s in steps)
        t.add_row(
            run.id,
            run.name,
            Text(run_state_text(run, True), style="red") if run.id in gone else styled(run.state),
            f"{done}/{len(steps)}",
            when(run.created),
            elapsed(run.started, run.ended),
            user_name(run.uid),
        )
    return t


@cache
def user_name(uid: int) -> str:
    """The user's login name as ``ps -o user`` shows it, else the uid: a container's or another
    machine's uid need not be in this machine's passwd (getpwuid(3))."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_text(run: RunRecord) -> str:
    """Who submitted the run, as ``show`` says it: the name ``ps`` shows and the ids, ``root (0:0)``."""
    return f"{user_name(run.uid)} ({run.uid}:{run.gid})"


def versions_text(attempts: list[AttemptRecord]) -> str | None:
    """``workflow v1: a#1 b#1; v2: b#2``: which workflow version each attempt ran, once a
    resume applied an edit (None while every attempt ran the workflow as submitted)."""
    known = [a for a in attempts if a.workflow_version is not None]
    if not any(a.workflow_version != 1 for a in known):
        return None
    by: dict[int, list[str]] = {}
    for a in sorted(known, key=lambda a: (a.started or 0.0, a.step, a.attempt)):
        by.setdefault(a.workflow_version or 0, []).append(f"{a.step}#{a.attempt}")
    return "workflow " + "; ".join(f"v{v}: {' '.join(names)}" for v, names in sorted(by.items()))


def short_image(ref: str) -> str:
    """``host/repo@sha256:0123456789ab...`` -> ``host/repo@sha256:0123456789ab``."""
    name, sep, digest = ref.partition("@")
    return f"{name}@{digest[:19]}" if sep else ref


STEP_COLUMNS = ("STEP", "STATE", "VARIANT", "NODE", "GPUS", "ATTEMPTS", "EXIT", "STARTED", "ELAPSED")


def _step_cells(s: StepRecord, now: float | None) -> list[str]:
    """A step's cells after STEP and STATE, the same in the plain and the rich table."""
    return [
        s.variant or "-",
        s.node or "-",
        gpus_text(s.gpus),
        str(s.attempts),
        "-" if s.exit_code is None else str(s.exit_code),
        when(s.started)[11:] if s.started else "-",
        elapsed(s.started, s.ended, now),
    ]


def _plain_steps(
    steps: list[StepRecord],
    *,
    reasons: bool,
    now: float | None,
    images: dict[str, str] | None,
    items: Mapping[str, str] | None,
) -> PlainTable:
    headers = list(STEP_COLUMNS)
    headers[1:1] = ["ITEM"] if items else []
    headers += ["IMAGE"] if images is not None else []
    headers += ["WHY"] if reasons else []
    rows = []
    for s in steps:
        row = [s.step, *([items.get(s.step, "")] if items else []), s.shown_state, *_step_cells(s, now)]
        row += [short_image(images.get(s.step, "-"))] if images is not None else []
        row += [s.reason] if reasons else []
        rows.append(row)
    return plain_table(headers, rows)


def steps_table(
    steps: list[StepRecord],
    *,
    reasons: bool = True,
    now: float | None = None,
    images: dict[str, str] | None = None,
    items: Mapping[str, str] | None = None,
) -> Table | PlainTable:
    """``items``: a fan-out item's values by step (``report.items``), in an ITEM column."""
    if len(steps) > BIG:
        return _plain_steps(steps, reasons=reasons, now=now, images=images, items=items)
    t = Table(box=None, header_style="bold", pad_edge=False)
    columns = list(STEP_COLUMNS)
    columns[1:1] = ["ITEM"] if items else []
    for col in columns:
        t.add_column(col, no_wrap=True)
    if images is not None:
        t.add_column("IMAGE", overflow="fold")
    if reasons:
        t.add_column("WHY", overflow="fold")
    for s in steps:
        # Text: a label such as [lr=0.1] is no markup
        row: list[Any] = [s.step, *([Text(items.get(s.step, ""))] if items else []), styled(s.shown_state)]
        row += _step_cells(s, now)
        if images is not None:
            row.append(short_image(images.get(s.step, "-")))
        if reasons:
            row.append(s.reason)
        t.add_row(*row)
    return t
