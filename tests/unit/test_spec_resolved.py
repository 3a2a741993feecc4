"""``Step.resolved_variants`` builds a single-image step's variant without validating it again
(its fields were validated on the step): the variant must be the one validation builds."""

from __future__ import annotations

import pickle

import pytest

from hetflow.spec import parse_workflow
from hetflow.spec.models import Variant

WORKFLOW = """
apiVersion: hetflow/v1
name: w
steps:
  plain:
    image: busybox
    command: [echo, hi]
  full:
    image: localhost/x:1
    command: [run, --size, '4']
    resources: {cpus: 2, memory: 1Gi, gpus: 1}
    gpu: {min_compute_capability: '7.0'}
    estimate: 2m
    env: {A: '1'}
    node_selector: {zone: a}
"""


@pytest.mark.parametrize("step", ["plain", "full"])
def test_the_default_variant_is_the_validated_one(step: str) -> None:
    s = parse_workflow(WORKFLOW, "w.yaml").workflow.steps[step]
    got = s.resolved_variants()["default"]
    fields = {k: getattr(got, k) for k in ("image", "command", "resources", "gpu", "estimate", "env", "node_selector")}
    validated = Variant.model_validate(fields)
    assert got == validated
    assert got.model_fields_set == validated.model_fields_set
    assert got.model_dump() == validated.model_dump()
    assert pickle.loads(pickle.dumps(got)) == validated
    assert isinstance(got.command, tuple) and got.command
