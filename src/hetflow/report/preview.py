"""The table of ``hetflow run --dry-run``: what each step would do (``execute.preview``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from hetflow.report.runs import gpus_text
from hetflow.report.tables import BIG, PlainTable, plain_table
from hetflow.spec import format_duration

if TYPE_CHECKING:  # the type only: `hetflow ps` must not load the execute stage
    from hetflow.execute import StepPreview

PREVIEW_COLUMNS = ("STEP", "WOULD", "VARIANT", "NODE", "GPUS", "EST.", "WHY")
_STYLE = {"runs": "cyan", "cached": "green", "skipped": "magenta"}


def preview_table(steps: Sequence[StepPreview]) -> Table | PlainTable:
    """One row per step, in the DAG's order: runs, cached (from which run) or skipped (why)."""
    rows = [
        (
            p.step,
            p.status,
            p.variant or "-",
            p.where or "-",
            gpus_text(p.gpus),
            format_duration(p.estimate) if p.estimate is not None else "-",
            p.why,
        )
        for p in steps
    ]
    if len(rows) > BIG:
        return plain_table(PREVIEW_COLUMNS, rows)
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in PREVIEW_COLUMNS:
        t.add_column(col, no_wrap=col != "WHY", overflow="fold")
    for row in rows:
        t.add_row(row[0], Text(row[1], style=_STYLE.get(row[1], "")), *row[2:])
    return t
