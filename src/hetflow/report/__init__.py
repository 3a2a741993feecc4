"""Reports for people and programs: text tables, JSON, Gantt pictures, explanations, a
run's trace (one row per attempt) and its self-contained HTML report.

Names are loaded on first use (as in ``hetflow.execute``): ``hetflow ps`` needs the run
tables, not the planner the Gantt and explanation modules bring in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.report.actual import actual_schedule
    from hetflow.report.gantt import gantt_svg, write_gantt
    from hetflow.report.items import item_label, item_labels, step_items
    from hetflow.report.nodes import node_to_json, render_node, render_topology
    from hetflow.report.plan import explain_step, plan_json, plan_table
    from hetflow.report.preview import preview_table
    from hetflow.report.progress import make_reporter
    from hetflow.report.runreport import run_report_html, timeline_svg
    from hetflow.report.runs import (
        param_text,
        params_json,
        params_table,
        ps_table,
        run_json,
        run_state_text,
        steps_table,
        user_text,
        versions_text,
    )
    from hetflow.report.tables import print_table
    from hetflow.report.trace import (
        DEFAULT_TRACE_FIELDS,
        TRACE_FIELDS,
        cached_steps,
        check_trace_fields,
        trace_json,
        trace_rows,
        trace_tsv,
    )

_WHERE = {
    "actual": ["actual_schedule"],
    "gantt": ["gantt_svg", "write_gantt"],
    "items": ["item_label", "item_labels", "step_items"],
    "nodes": ["node_to_json", "render_node", "render_topology"],
    "plan": ["explain_step", "plan_json", "plan_table"],
    "preview": ["preview_table"],
    "progress": ["make_reporter"],
    "runreport": ["run_report_html", "timeline_svg"],
    "runs": [
        "param_text",
        "params_json",
        "params_table",
        "ps_table",
        "run_json",
        "run_state_text",
        "steps_table",
        "user_text",
        "versions_text",
    ],
    "tables": ["print_table"],
    "trace": [
        "DEFAULT_TRACE_FIELDS",
        "TRACE_FIELDS",
        "cached_steps",
        "check_trace_fields",
        "trace_json",
        "trace_rows",
        "trace_tsv",
    ],
}
__all__ = [
    "DEFAULT_TRACE_FIELDS",
    "TRACE_FIELDS",
    "actual_schedule",
    "cached_steps",
    "check_trace_fields",
    "explain_step",
    "gantt_svg",
    "item_label",
    "item_labels",
    "make_reporter",
    "node_to_json",
    "param_text",
    "params_json",
    "params_table",
    "plan_json",
    "plan_table",
    "preview_table",
    "print_table",
    "ps_table",
    "render_node",
    "render_topology",
    "run_json",
    "run_report_html",
    "run_state_text",
    "step_items",
    "steps_table",
    "timeline_svg",
    "trace_json",
    "trace_rows",
    "trace_tsv",
    "user_text",
    "versions_text",
    "write_gantt",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
