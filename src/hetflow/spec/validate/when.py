"""``when:`` on a step: run it only when a small condition holds (Nextflow's ``when:``).

The condition is an expression over the workflow's params and small outputs of upstream
steps, read with Python's parser (``ast``) and evaluated here, node by node, from a short
list of what is allowed; nothing is ever executed::

    when: "params.mode == 'full'"               # '{{ params.mode }}' is the same
    when: "params.epochs > 10 and not params.quick"
    when: "output('check/ok.txt')"              # a file check wrote: true/false, a number, a word
    when: "output('probe/gpus.txt') >= 2"
    when: "params.size in ['m', 'l']"           # in a fan-out: '{{ item.lr }} > 0.01'

Allowed: ``and``, ``or``, ``not``, comparisons (``== != < <= > >= in``, ``not in``),
parentheses, literals (strings, numbers, ``true``/``false``, lists of them), ``params.NAME``
and ``output('STEP/OUTPUT')``.  An output is read when STEP has succeeded (at most 64 KiB,
stripped): ``true``/``false`` (any case) become booleans, a number a number, anything else
a string.  A step that reads an output depends on that step.

A step whose condition is false is skipped ("condition false: ..."), and so is every step
that needs it; neither fails the run.  Params-only conditions are known before the run
(``hetflow run --dry-run`` shows them); conditions on outputs are decided when the output
exists.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from hetflow.errors import Problem
from hetflow.spec.models import Workflow
from hetflow.spec.source.problems import did_you_mean

LineOf = Callable[[tuple[str | int, ...]], int]

# The reason of a step skipped by its condition, and of the steps that need it: the run's
# outcome does not count them as failures (execute.runner), the dry run shows them.
SKIPPED_BY_CONDITION = "condition false: "
CONDITION_MAX_BYTES = 64 * 1024  # of an output a condition reads
_BRACED = re.compile(r"\{\{\s*(params\.[A-Za-z_][A-Za-z0-9_-]*)\s*\}\}")
_OUTPUT_REF = re.compile(r"""output\(\s*(['"])([^'"]+)\1\s*\)""")
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: bool(a == b),
    ast.NotEq: lambda a, b: bool(a != b),
    ast.Lt: lambda a, b: bool(a < b),
    ast.LtE: lambda a, b: bool(a <= b),
    ast.Gt: lambda a, b: bool(a > b),
    ast.GtE: lambda a, b: bool(a >= b),
    ast.In: lambda a, b: bool(a in b),
    ast.NotIn: lambda a, b: bool(a not in b),
}
_WORDS = {"true": True, "false": False, "True": True, "False": False}


class ConditionError(ValueError):
    """A condition that cannot be read or evaluated; the message says why."""


def output_refs(text: str) -> list[str]:
    """The ``STEP/OUTPUT`` references a condition reads, in order."""
    return [m.group(2) for m in _OUTPUT_REF.finditer(text)]


def parse_condition(text: str) -> ast.expr:
    """The condition's syntax tree, checked against what is allowed; ConditionError if not."""
    source = _BRACED.sub(r"\1", text).strip()
    if not source:
        raise ConditionError("the condition is empty; write e.g. \"params.mode == 'full'\"")
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as exc:
        raise ConditionError(f"cannot read {text!r}: {exc.msg} at column {exc.offset}") from None
    _check(tree, text)
    return tree


def _check(node: ast.expr, text: str) -> None:
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, text)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _check(node.operand, text)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise ConditionError(f"{text!r}: {type(op).__name__} is not a comparison hetflow allows")
        for v in (node.left, *node.comparators):
            _check(v, text)
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, str | int | float | bool):
            raise ConditionError(f"{text!r}: {node.value!r} is not a string, number or boolean")
    elif isinstance(node, ast.List | ast.Tuple):
        for v in node.elts:
            _check(v, text)
    elif isinstance(node, ast.Name):
        if node.id not in _WORDS:
            raise ConditionError(
                f"{text!r}: {node.id!r} names nothing; write params.NAME, output('STEP/OUTPUT'), "
                f"a quoted string ('{node.id}') or true/false"
            )
    elif isinstance(node, ast.Attribute):
        if not (isinstance(node.value, ast.Name) and node.value.id == "params"):
            raise ConditionError(f"{text!r}: only params.NAME may use a dot")
    elif isinstance(node, ast.Call):
        ok = (
            isinstance(node.func, ast.Name)
            and node.func.id == "output"
            and len(node.args) == 1
            and not node.keywords
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and "/" in node.args[0].value
        )
        if not ok:
            raise ConditionError(f"{text!r}: the one function is output('STEP/OUTPUT')")
    else:
        raise ConditionError(f"{text!r}: {type(node).__name__} is not allowed in a condition")


def params_of(tree: ast.expr) -> list[str]:
    """The params a condition names."""
    return [
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "params"
    ]


def evaluate(text: str, params: Mapping[str, Any], read: Callable[[str], str] | None = None) -> bool:
    """Whether the condition holds.  ``read(STEP/OUTPUT)``: the output's text (None: a
    condition that reads an output cannot be decided yet: ConditionError)."""
    tree = parse_condition(text)

    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.BoolOp):
            results = (truth(value(v)) for v in node.values)
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.UnaryOp):
            return not truth(value(node.operand))
        if isinstance(node, ast.Compare):
            left = value(node.left)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = value(right_node)
                try:
                    if not _COMPARE[type(op)](left, right):
                        return False
                except TypeError:
                    raise ConditionError(f"{text!r}: cannot compare {left!r} with {right!r}") from None
                left = right
            return True
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple):
            return [value(v) for v in node.elts]
        if isinstance(node, ast.Name):
            return _WORDS[node.id]
        if isinstance(node, ast.Attribute):
            if node.attr not in params:
                raise ConditionError(f"{text!r}: no param {node.attr!r}{did_you_mean(node.attr, params)}")
            return params[node.attr]
        assert isinstance(node, ast.Call) and isinstance(node.args[0], ast.Constant)
        ref = str(node.args[0].value)
        if read is None:
            raise ConditionError(f"{text!r}: {ref} is read when its step has succeeded")
        return typed(read(ref))

    return truth(value(tree))


def truth(v: Any) -> bool:
    """A value as a condition: booleans as they are, numbers non-zero, strings and lists non-empty."""
    return bool(v)


def typed(text: str) -> Any:
    """An output's text as a value: true/false, a number, else the stripped string."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(s)
        except ValueError:
            pass
    return s


def when_problems(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    """A step's condition (``spec.validate.when``): readable, its params declared, each output it
    reads declared by an existing step; a params-only one evaluated now, so that a
    comparison that cannot be made is refused before the run."""
    problems = []
    for name, step in wf.steps.items():
        if step.when is None or ((step.foreach is not None or step.matrix is not None) and "{{" in step.when):
            continue  # a pending fan-out's items fill in their condition when expanded
        where = line_of(("steps", name, "when"))
        try:
            tree = parse_condition(step.when)
        except ConditionError as exc:
            problems.append(Problem(file, where, f"when of step {name!r}: {exc}"))
            continue
        unknown = [p for p in params_of(tree) if p not in wf.params]
        for p in unknown:
            problems.append(
                Problem(
                    file, where, f"when of step {name!r} names no param {p!r}{did_you_mean(p, wf.params)}; declare it"
                )
            )
        refs = output_refs(step.when)
        for ref in refs:
            parent, _, rel = ref.partition("/")
            declared = wf.steps[parent].outputs if parent in wf.steps else ()
            if parent == name:
                problems.append(Problem(file, where, f"when of step {name!r} reads its own output {ref!r}"))
            elif parent not in wf.steps:
                problems.append(
                    Problem(
                        file,
                        where,
                        f"when of step {name!r} reads {ref!r}: no step {parent!r}{did_you_mean(parent, wf.steps)}",
                    )
                )
            elif not any(rel == o or rel.startswith(o.rstrip("/") + "/") for o in declared):
                have = ", ".join(declared) or "none"
                problems.append(
                    Problem(
                        file,
                        where,
                        f"when of step {name!r} reads {ref!r}, which {parent!r} does not declare (its outputs: {have})",
                    )
                )
        if not refs and not unknown:
            try:
                evaluate(step.when, wf.params)
            except ConditionError as exc:
                problems.append(Problem(file, where, f"when of step {name!r}: {exc}"))
    return problems
