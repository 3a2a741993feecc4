"""What to run: the workflow models, YAML loading with file:line errors, DAG helpers.

    models       the workflow format (``apiVersion: hetflow/v1``): the contract users write against
    fields/      the parts a step is written with: units, resources, retry, checkpoint, batch,
                 elastic, imageref, naming
    source/      the file as text: yamlfile (each key's line), problems (``file:line``), templated
    expansion/   fan-out: fanout (``foreach``, ``matrix``: one step per item), matrix
    validate/    checks of a whole workflow: dag, checks, when
    load/        loader (YAML + pydantic + templating), params, overrides, templates, wfcommons,
                 salvage (every problem in one pass, for validate)

Names are loaded on first use (as in ``hetflow.execute``): ``hetflow ps`` reads the store and
prints times without building the workflow models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.spec.expansion.fanout import (
        MAX_FANOUT_ITEMS,
        Source,
        expand,
        file_items,
        is_fanout,
        pending_source,
    )
    from hetflow.spec.fields.batch import AUTO_BATCH, AUTO_MAX_ESTIMATE, AUTO_MIN_ITEMS, Batch
    from hetflow.spec.fields.checkpoint import DEFAULT_STOP_GRACE, Checkpoint
    from hetflow.spec.fields.imageref import DOCKER_HUB, ImageReference, ReferenceSyntaxError, parse_reference
    from hetflow.spec.fields.naming import DATA_PREFIX, FANOUT_SEP, fanout_parent, item_text, step_label
    from hetflow.spec.fields.resources import (
        GpuConstraint,
        GpuRequest,
        GpuVendor,
        Resources,
        mig_memory_gb,
        mig_profile,
        mig_slices,
    )
    from hetflow.spec.fields.retry import Backoff, Retry, parse_factor
    from hetflow.spec.fields.units import (
        cc_tuple,
        compute_capability,
        format_bytes,
        format_duration,
        parse_duration,
        parse_memory,
    )
    from hetflow.spec.load.loader import LoadedWorkflow, expand_loaded, load_workflow, parse_workflow
    from hetflow.spec.load.overrides import (
        RESOURCE_KINDS,
        Origin,
        ResourceOverrides,
        override_resources,
        resource_problem,
    )
    from hetflow.spec.load.salvage import salvage_workflow
    from hetflow.spec.load.wfcommons import convert_wfcommons
    from hetflow.spec.models import DataSet, Gang, Publish, Step, Variant, Workflow
    from hetflow.spec.source.problems import did_you_mean, problem_from_error
    from hetflow.spec.source.yamlfile import compose_yaml, line_of, read_yaml_text
    from hetflow.spec.validate.checks import CHECKPOINT_ENV, GANG_ENV, RESERVED_ENV, edges_of
    from hetflow.spec.validate.dag import descendants, topo_order
    from hetflow.spec.validate.when import (
        CONDITION_MAX_BYTES,
        SKIPPED_BY_CONDITION,
        ConditionError,
        evaluate,
        output_refs,
    )

_WHERE = {
    "validate.checks": ["CHECKPOINT_ENV", "GANG_ENV", "RESERVED_ENV", "edges_of"],
    "validate.dag": ["descendants", "topo_order"],
    "fields.imageref": ["DOCKER_HUB", "ImageReference", "ReferenceSyntaxError", "parse_reference"],
    "expansion.fanout": ["MAX_FANOUT_ITEMS", "Source", "expand", "file_items", "is_fanout", "pending_source"],
    "validate.when": ["CONDITION_MAX_BYTES", "SKIPPED_BY_CONDITION", "ConditionError", "evaluate", "output_refs"],
    "load.loader": ["LoadedWorkflow", "expand_loaded", "load_workflow", "parse_workflow"],
    "load.overrides": ["RESOURCE_KINDS", "Origin", "ResourceOverrides", "override_resources", "resource_problem"],
    "source.problems": ["did_you_mean", "problem_from_error"],
    "source.yamlfile": ["compose_yaml", "line_of", "read_yaml_text"],
    "models": ["DataSet", "Gang", "Publish", "Step", "Variant", "Workflow"],
    "fields.naming": ["DATA_PREFIX", "FANOUT_SEP", "fanout_parent", "item_text", "step_label"],
    "fields.resources": [
        "GpuConstraint",
        "GpuRequest",
        "GpuVendor",
        "Resources",
        "mig_memory_gb",
        "mig_profile",
        "mig_slices",
    ],
    "fields.retry": ["Backoff", "Retry", "parse_factor"],
    "fields.checkpoint": ["DEFAULT_STOP_GRACE", "Checkpoint"],
    "fields.batch": ["AUTO_BATCH", "AUTO_MAX_ESTIMATE", "AUTO_MIN_ITEMS", "Batch"],
    "fields.units": [
        "cc_tuple",
        "compute_capability",
        "format_bytes",
        "format_duration",
        "parse_duration",
        "parse_memory",
    ],
    "load.wfcommons": ["convert_wfcommons"],
    "load.salvage": ["salvage_workflow"],
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
    "item_text",
    "line_of",
    "load_workflow",
    "mig_memory_gb",
    "mig_profile",
    "mig_slices",
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
    "salvage_workflow",
    "step_label",
    "topo_order",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
