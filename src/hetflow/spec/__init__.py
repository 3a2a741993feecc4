"""What to run: the workflow models, YAML loading with file:line errors, DAG helpers."""

from hetflow.spec.checks import RESERVED_ENV, edges_of
from hetflow.spec.dag import descendants, topo_order
from hetflow.spec.loader import LoadedWorkflow, load_workflow, parse_workflow
from hetflow.spec.models import GpuConstraint, GpuRequest, Resources, Step, Variant, Workflow
from hetflow.spec.units import format_bytes, format_duration, parse_duration
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
    "convert_wfcommons",
    "descendants",
    "edges_of",
    "format_bytes",
    "format_duration",
    "load_workflow",
    "parse_duration",
    "parse_workflow",
    "topo_order",
]
