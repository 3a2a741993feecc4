"""A run's record: ``hetflow trace`` (one row per attempt) and ``hetflow report`` (one
self-contained HTML page), after Nextflow's trace.txt and execution report."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from hetflow.cli.common import err, open_store, print_json
from hetflow.errors import UsageError
from hetflow.report import TRACE_FIELDS, cached_steps, check_trace_fields, step_items, trace_json, trace_rows, trace_tsv

# The report's page (``report.runreport``: the planner's instance, the inventory's models, the
# Gantt chart) is imported in ``report`` only: `hetflow trace` reads the store and prints.


def register(app: typer.Typer) -> None:
    app.command()(trace)
    app.command()(report)


def trace(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough)."),
    json_out: bool = typer.Option(False, "--json", help="Raw values (seconds, bytes, epoch times; null: unknown)."),
    fields: list[str] = typer.Option(
        [], "--fields", "-f", help=f"Columns, comma-separated or repeated, from: {', '.join(TRACE_FIELDS)}."
    ),
) -> None:
    """One row per attempt: where and how it ran, its exit, times, peak memory, CPU time."""
    chosen = check_trace_fields(fields)
    store = open_store()
    rid = store.resolve_run_id(run_id)
    rows = trace_rows(store.attempts(rid), cached_steps(store.steps(rid)), step_items(store.expansions(rid)))
    if json_out:
        print_json(trace_json(rows, chosen if fields else TRACE_FIELDS))
    else:
        sys.stdout.write(trace_tsv(rows, chosen))


def report(
    run_id: str = typer.Argument(..., help="Run id (a unique prefix is enough)."),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="The HTML file to write."),
) -> None:
    """Write one self-contained HTML page about a run: summary, planned vs actual timeline,
    resources asked and used (over-asking steps flagged), and the trace."""
    if output.is_dir():
        raise UsageError(f"-o {output}: is a directory; give a file name, e.g. -o {output / 'report.html'}")
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: the directory {output.parent} does not exist; create it or write elsewhere")
    from hetflow.execute import stored_plan
    from hetflow.report import item_labels, run_report_html

    store = open_store()
    rid = store.resolve_run_id(run_id)
    labels = item_labels(store.expansions(rid))
    page = run_report_html(
        store.run(rid), store.steps(rid), store.attempts(rid), stored_plan(store, rid), labels, store.run_params(rid)
    )
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"-o {output}: cannot write it ({exc.strerror})") from None
    err.print(f"report of run {rid} written to {output}", highlight=False)
