"""What to run: the workflow models, YAML loading with file:line errors, DAG helpers.

Names are loaded on first use (as in ``hetflow.execute``): ``hetflow ps`` reads the store and
prints times without building the workflow models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.spec.batch import AUTO_BATCH, AUTO_MAX_ESTIMATE, AUTO_MIN_ITEMS, Batch
    from hetflow.spec.checkpoint import DEFAULT_STOP_GRACE, Checkpoint
    from hetflow.spec.checks import CHECKPOINT_ENV, GANG_ENV, RESERVED_ENV, edges_of
    from hetflow.spec.dag import descendants, topo_order
    from hetflow.spec.fanout import (
        MAX_FANOUT_ITEMS,
        Source,
        expand,
        file_items,
        is_fanout,
        pending_source,
    )
    from hetflow.spec.imageref import DOCKER_HUB, ImageReference, ReferenceSyntaxError, parse_reference
    from hetflow.spec.loader import LoadedWorkflow, expand_loaded, load_workflow, no_cyclic_gc, parse_workflow
    from hetflow.spec.models import DataSet, Gang, Publish, Step, Variant, Workflow
    from hetflow.spec.naming import DATA_PREFIX, FANOUT_SEP, fanout_parent
    from hetflow.spec.overrides import RESOURCE_KINDS, Origin, ResourceOverrides, override_resources, resource_problem
    from hetflow.spec.problems import did_you_mean, problem_from_error
    from hetflow.spec.resources import (
        GpuConstraint,
        GpuRequest,
        GpuVendor,
        Resources,
        mig_memory_gb,
        mig_profile,
        mig_slices,
    )
    from hetflow.spec.retry import Backoff, Retry, parse_factor
    from hetflow.spec.units import (
        cc_tuple,
        compute_capability,
        format_bytes,
        format_duration,
        parse_duration,
        parse_memory,
    )
    from hetflow.spec.wfcommons import convert_wfcommons
    from hetflow.spec.when import CONDITION_MAX_BYTES, SKIPPED_BY_CONDITION, ConditionError, evaluate, output_refs
    from hetflow.spec.yamlfile import compose_yaml, line_of, read_yaml_text

_WHERE = {
    "checks": ["CHECKPOINT_ENV", "GANG_ENV", "RESERVED_ENV", "edges_of"],
    "dag": ["descendants", "topo_order"],
    "imageref": ["DOCKER_HUB", "ImageReference", "ReferenceSyntaxError", "parse_reference"],
    "fanout": ["MAX_FANOUT_ITEMS", "Source", "expand", "file_items", "is_fanout", "pending_source"],
    "when": ["CONDITION_MAX_BYTES", "SKIPPED_BY_CONDITION", "ConditionError", "evaluate", "output_refs"],
    "loader": ["LoadedWorkflow", "expand_loaded", "load_workflow", "no_cyclic_gc", "parse_workflow"],
    "overrides": ["RESOURCE_KINDS", "Origin", "ResourceOverrides", "override_resources", "resource_problem"],
    "problems": ["did_you_mean", "problem_from_error"],
    "yamlfile": ["compose_yaml", "line_of", "read_yaml_text"],
    "models": ["DataSet", "Gang", "Publish", "Step", "Variant", "Workflow"],
    "naming": ["DATA_PREFIX", "FANOUT_SEP", "fanout_parent"],
    "resources": [
        "GpuConstraint",
        "GpuRequest",
        "GpuVendor",
        "Resources",
        "mig_memory_gb",
        "mig_profile",
        "mig_slices",
    ],
    "retry": ["Backoff", "Retry", "parse_factor"],
    "checkpoint": ["DEFAULT_STOP_GRACE", "Checkpoint"],
    "batch": ["AUTO_BATCH", "AUTO_MAX_ESTIMATE", "AUTO_MIN_ITEMS", "Batch"],
    "units": ["cc_tuple", "compute_capability", "format_bytes", "format_duration", "parse_duration", "parse_memory"],
    "wfcommons": ["convert_wfcommons"],
}
__all__ = [
    "AUTO_BATCH",
    "AUTO_MAX_ESTIMATE",
    "AUTO_MIN_ITEMS",
    "CHECKPOINT_ENV",
    "CONDITION_MAX_BYTES",
    "DATA_PREFIX",
    "DEFAULT_STOP_GRACE",
    "DOCKER_HUB",
    "FANOUT_SEP",
    "GANG_ENV",
    "MAX_FANOUT_ITEMS",
    "RESERVED_ENV",
    "RESOURCE_KINDS",
    "SKIPPED_BY_CONDITION",
    "Backoff",
    "Batch",
    "Checkpoint",
    "ConditionError",
    "DataSet",
    "Gang",
    "GpuConstraint",
    "GpuRequest",
    "GpuVendor",
    "ImageReference",
    "LoadedWorkflow",
    "Origin",
    "Publish",
    "ReferenceSyntaxError",
    "ResourceOverrides",
    "Resources",
    "Retry",
    "Source",
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
    "evaluate",
    "expand",
    "expand_loaded",
    "fanout_parent",
    "file_items",
    "format_bytes",
    "format_duration",
    "is_fanout",
    "line_of",
    "load_workflow",
    "mig_memory_gb",
    "mig_profile",
    "mig_slices",
    "no_cyclic_gc",
    "output_refs",
    "override_resources",
    "parse_duration",
    "parse_factor",
    "parse_memory",
    "parse_reference",
    "parse_workflow",
    "pending_source",
    "problem_from_error",
    "read_yaml_text",
    "resource_problem",
    "topo_order",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
