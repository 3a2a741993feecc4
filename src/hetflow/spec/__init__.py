"""What to run: the workflow models, YAML loading with file:line errors, DAG helpers."""

from hetflow.spec.checks import RESERVED_ENV, edges_of
from hetflow.spec.dag import descendants, topo_order
from hetflow.spec.loader import (
    LoadedWorkflow,
    compose_yaml,
    did_you_mean,
    line_of,
    load_workflow,
    parse_workflow,
    problem_from_error,
)
from hetflow.spec.models import GpuConstraint, GpuRequest, Resources, Step, Variant, Workflow
from hetflow.spec.units import cc_tuple, compute_capability, format_bytes, format_duration, parse_duration, parse_memory
from hetflow.spec.wfcommons import convert_wfcommons

__all__ = [
    "RESERVED_ENV",
    "GpuConstraint",
    "GpuRequest",
    "LoadedWorkflow",
    "Resources",
    "Step",
    "Variant",
    "Workflow",
    "cc_tuple",
    "compose_yaml",
    "compute_capability",
    "convert_wfcommons",
    "descendants",
    "did_you_mean",
    "edges_of",
    "format_bytes",
    "format_duration",
    "line_of",
    "load_workflow",
    "parse_duration",
    "parse_memory",
    "parse_workflow",
    "problem_from_error",
    "topo_order",
]
