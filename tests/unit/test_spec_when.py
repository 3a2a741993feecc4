"""`when:` conditions (spec.when): what they allow, how they evaluate, and what they refuse;
nothing in a condition is ever executed."""

from __future__ import annotations

import pytest

from hetflow.spec import ConditionError, evaluate, output_refs
from hetflow.spec.load.loader import parse_workflow

PARAMS = {"mode": "full", "n": 3, "quick": False, "sizes": ["m", "l"], "size": "m"}
OUTPUTS = {"check/ok.txt": "true\n", "check/no.txt": "False", "probe/gpus.txt": " 2 \n", "probe/name": "a100\n"}


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ("params.mode == 'full'", True),
        ("{{ params.mode }} == 'full'", True),
        ("{{params.n}} > 2 and not params.quick", True),
        ("params.n > 3 or params.quick", False),
        ("params.size in ['m', 'l']", True),
        ("params.size not in params.sizes", False),
        ("1 < params.n <= 3", True),
        ("output('check/ok.txt')", True),
        ("output('check/no.txt')", False),
        ("output('probe/gpus.txt') >= 2", True),
        ("output('probe/name') == 'a100'", True),
        ("true and not false", True),
        ("(params.n == 3) == true", True),
    ],
)
def test_conditions_evaluate(text: str, holds: bool) -> None:
    assert evaluate(text, PARAMS, OUTPUTS.__getitem__) is holds


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("__import__('os').system('touch /tmp/x')", "the one function is output('STEP/OUTPUT')"),
        ("params.__class__", "no param '__class__'"),
        ("open('/etc/passwd')", "the one function is output"),
        ("[x for x in params]", "ListComp is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("params['mode']", "Subscript is not allowed"),
        ("f'{params}'", "JoinedStr is not allowed"),
        ("mode == 'full'", "'mode' names nothing"),
        ("params.mode ==", "cannot read"),
        ("params.mode is None", "Is is not a comparison"),
        ("params.mdoe == 1", "no param 'mdoe' (did you mean 'mode'?)"),
        ("params.mode > 3", "cannot compare 'full' with 3"),
        ("output('check/ok.txt')", "is read when its step has succeeded"),
        ("  ", "the condition is empty"),
    ],
)
def test_what_a_condition_refuses_is_said(text: str, said: str) -> None:
    with pytest.raises(ConditionError) as exc:
        evaluate(text, PARAMS)
    assert said in str(exc.value)


def test_a_step_depends_on_the_step_whose_output_its_condition_reads() -> None:
    loaded = parse_workflow(
        """apiVersion: hetflow/v1
name: w
steps:
  check: {image: busybox, command: [true], outputs: [ok.txt]}
  go: {image: busybox, command: [true], when: "output('check/ok.txt') and output(\\"check/ok.txt\\")"}
"""
    )
    assert loaded.workflow.steps["go"].dependencies() == ("check",)
    assert output_refs(loaded.workflow.steps["go"].when or "") == ["check/ok.txt", "check/ok.txt"]
