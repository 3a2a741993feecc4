"""Reports for people and programs: text tables, JSON, Gantt pictures, explanations, a
run's trace (one row per attempt) and its self-contained HTML report."""

from hetflow.report.actual import actual_schedule
from hetflow.report.gantt import write_gantt
from hetflow.report.nodes import node_to_json, render_node
from hetflow.report.plan import explain_step, plan_json, plan_table
from hetflow.report.progress import make_reporter
from hetflow.report.runreport import run_report_html
from hetflow.report.runs import ps_table, run_json, steps_table
from hetflow.report.trace import (
    DEFAULT_TRACE_FIELDS,
    TRACE_FIELDS,
    cached_steps,
    check_trace_fields,
    trace_json,
    trace_rows,
    trace_tsv,
)

__all__ = [
    "DEFAULT_TRACE_FIELDS",
    "TRACE_FIELDS",
    "actual_schedule",
    "cached_steps",
    "check_trace_fields",
    "explain_step",
    "make_reporter",
    "node_to_json",
    "plan_json",
    "plan_table",
    "ps_table",
    "render_node",
    "run_json",
    "run_report_html",
    "steps_table",
    "trace_json",
    "trace_rows",
    "trace_tsv",
    "write_gantt",
]
