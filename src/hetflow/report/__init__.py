"""Reports for people and programs: text tables, JSON, Gantt pictures, explanations."""

from hetflow.report.actual import actual_schedule
from hetflow.report.gantt import write_gantt
from hetflow.report.nodes import node_to_json, render_node
from hetflow.report.plan import explain_step, plan_json, plan_table
from hetflow.report.progress import make_reporter
from hetflow.report.runs import ps_table, run_json, steps_table

__all__ = [
    "actual_schedule",
    "explain_step",
    "make_reporter",
    "node_to_json",
    "plan_json",
    "plan_table",
    "ps_table",
    "render_node",
    "run_json",
    "steps_table",
    "write_gantt",
]
