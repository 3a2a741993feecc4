"""What to run: the workflow models, YAML loading with file:line errors, DAG helpers."""

from hetflow.spec.loader import load_workflow, parse_workflow
from hetflow.spec.models import GpuConstraint, Resources, Step, Variant, Workflow

__all__ = [
    "GpuConstraint",
    "Resources",
    "Step",
    "Variant",
    "Workflow",
    "load_workflow",
    "parse_workflow",
]
