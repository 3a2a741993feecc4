"""Elastic gangs in the format (``spec.fields.elastic``): ``replicas: {min, max}``, validated with
file:line errors; every other stage still reads ``replicas`` as the size to plan for (max)."""

from __future__ import annotations

import pytest

from hetflow.errors import SpecError
from hetflow.spec import Gang
from tests.unit.builders import load, load_steps

V1 = "apiVersion: hetflow/v1\nname: wf\nsteps:\n"
APP = "    checkpoint: {mode: app}\n"


def test_an_elastic_gang_plans_at_max_and_keeps_its_range() -> None:
    step = load_steps(
        """
        train:
          image: x
          resources: {cpus: 0.5, memory: 64Mi}
          checkpoint: {mode: app}
          gang: {replicas: {min: 2, max: 4}, launcher: torch}
        """
    ).workflow.steps["train"]
    assert step.gang is not None and step.gang.elastic is not None
    assert (step.replicas, step.gang.replicas, step.gang.elastic.min, step.gang.elastic.max) == (4, 4, 2, 4)
    # a run's stored spec (model_dump) reads back alike
    assert Gang.model_validate(step.gang.model_dump()) == step.gang


def test_min_equal_to_max_is_a_fixed_gang() -> None:
    g = Gang.model_validate({"replicas": {"min": 3, "max": 3}})
    assert (g.replicas, g.elastic) == (3, None)


BAD = [
    pytest.param("{min: 3, max: 2}", "min (3) is more than max (2)", id="min-over-max"),
    pytest.param("{min: 0, max: 2}", "out of range", id="min-0"),
    pytest.param("{min: 2, max: 2000}", "out of range", id="max-over-1024"),
    pytest.param("{min: 2}", "needs both min and max", id="no-max"),
    pytest.param("{min: 2, max: 4, step: 1}", "replicas has step", id="unknown-key"),
    pytest.param("{min: two, max: 4}", "must be whole numbers", id="not-a-number"),
]


@pytest.mark.parametrize(("replicas", "phrase"), BAD)
def test_a_bad_range_is_an_error_on_the_gang_line(replicas: str, phrase: str) -> None:
    with pytest.raises(SpecError) as info:
        load(V1 + f"  t:\n    image: x\n{APP}    gang: {{replicas: {replicas}}}\n")
    errors = [p for p in info.value.problems if p.severity == "error"]
    assert [(p.file, p.line) for p in errors] == [("wf.yaml", 7)], errors
    assert phrase in errors[0].message and "replicas: {min: M, max: N}" in errors[0].message, errors[0].message


@pytest.mark.parametrize(
    "checkpoint", [pytest.param("", id="none"), pytest.param("    checkpoint: {mode: app, every: 1m}\n", id="app-ok")]
)
def test_an_elastic_gang_must_save_its_own_state(checkpoint: str) -> None:
    body = V1 + f"  t:\n    image: x\n{checkpoint}    gang: {{replicas: {{min: 1, max: 3}}}}\n"
    if checkpoint:
        assert load(body).workflow.steps["t"].replicas == 3
        return
    with pytest.raises(SpecError) as info:
        load(body)
    message = info.value.problems[0].message
    assert "is elastic: growing it stops every rank" in message and "checkpoint: {mode: app}" in message, message


def test_elastic_written_out_must_agree_with_replicas() -> None:
    with pytest.raises(ValueError, match=r"elastic max \(3\) differs from replicas \(4\)"):
        Gang.model_validate({"replicas": 4, "elastic": {"min": 2, "max": 3}})
    with pytest.raises(ValueError, match="give the range once"):
        Gang.model_validate({"replicas": {"min": 2, "max": 4}, "elastic": {"min": 2, "max": 4}})
