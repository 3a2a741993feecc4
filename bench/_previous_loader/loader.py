# Vendored verbatim from hetflow at commit 4aabbd9 (src/hetflow/spec/loader.py), imports rewritten to
# this folder: the loader as it was before the fast path, so bench/loader.py compares both in one run.
# ruff: noqa
# mypy: ignore-errors
"""Load a workflow file: YAML with line numbers, pydantic validation, templating.

Every problem found is reported at once, each as ``file:line: what to change``.
Line numbers come from the YAML node tree, so pydantic's error locations
(``steps.pool.variants.gpu.resources.gpus``) map back to the line the user wrote.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

from hetflow.errors import Problem, SpecError
from bench._previous_loader.checks import check_workflow
from bench._previous_loader.models import ParamValue, Workflow

Loc = tuple[str | int, ...]
_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PARAM = re.compile(r"^params\.([A-Za-z_][A-Za-z0-9_-]*)$")


@dataclass(frozen=True)
class LoadedWorkflow:
    """A validated, templated workflow and where each of its parts was written."""

    workflow: Workflow
    file: str
    text: str
    lines: Mapping[Loc, int] = field(repr=False)
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    notes: tuple[Problem, ...] = ()

    def line(self, *loc: str | int) -> int:
        return line_of(self.lines, loc)


def line_of(lines: Mapping[Loc, int], loc: Loc) -> int:
    """The line of the deepest known prefix of ``loc`` (1 when nothing matches)."""
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return 1


def load_workflow(path: str | Path, overrides: Mapping[str, object] | None = None) -> LoadedWorkflow:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([Problem(str(p), 1, "no such file; give the path of a workflow YAML")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([Problem(str(p), 1, f"cannot read the file: {exc}")]) from None
    return parse_workflow(text, str(p), overrides)


def parse_workflow(
    text: str, file: str = "<workflow>", overrides: Mapping[str, object] | None = None
) -> LoadedWorkflow:
    """Parse, validate and template a workflow; raise SpecError listing every problem."""
    data, lines, problems = compose_yaml(text, file)
    if problems:
        raise SpecError(problems)
    if not isinstance(data, dict):
        raise SpecError([Problem(file, 1, "a workflow is a YAML mapping with apiVersion, name and steps")])
    problems = _apply_overrides(data, overrides or {}, file, lines)
    try:
        wf = Workflow.model_validate(data)
    except ValidationError as exc:
        problems += [problem_from_error(err, file, lines) for err in exc.errors()]
        raise SpecError(problems) from None
    wf, template_problems = _render(wf, file, lines)
    problems += template_problems
    problems += check_workflow(wf, file, lambda loc: line_of(lines, loc))
    if any(p.severity == "error" for p in problems):
        raise SpecError(problems)
    return LoadedWorkflow(wf, file, text, dict(lines), dict(wf.params), tuple(problems))


# --- YAML with line numbers -------------------------------------------------------------


def compose_yaml(text: str, file: str) -> tuple[Any, dict[Loc, int], list[Problem]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        return None, {}, [Problem(file, line, f"not valid YAML: {exc.problem or exc}")]
    if node is None:
        return (
            None,
            {},
            [Problem(file, 1, "the file is empty; a workflow needs apiVersion, name and steps")],
        )
    lines: dict[Loc, int] = {}
    problems: list[Problem] = []
    constructor = yaml.SafeLoader("")
    return _build(node, (), lines, problems, file, constructor), lines, problems


def _build(
    node: yaml.Node,
    path: Loc,
    lines: dict[Loc, int],
    problems: list[Problem],
    file: str,
    constructor: yaml.SafeLoader,
) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for knode, vnode in node.value:
            key = constructor.construct_object(knode, deep=True)
            if isinstance(key, list | dict):
                problems.append(Problem(file, knode.start_mark.line + 1, "a mapping key must be a plain value"))
                continue
            if key in out:
                problems.append(Problem(file, knode.start_mark.line + 1, f"duplicate key {key!r}; keep only one"))
            lines[(*path, key)] = knode.start_mark.line + 1
            out[key] = _build(vnode, (*path, key), lines, problems, file, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(v, (*path, i), lines, problems, file, constructor) for i, v in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)


# --- params ---------------------------------------------------------------------------


def _apply_overrides(
    data: dict[str, Any], overrides: Mapping[str, object], file: str, lines: Mapping[Loc, int]
) -> list[Problem]:
    """``-p key=value`` replaces a declared param; the value is read as a YAML scalar so
    ``-p size=128`` stays a number."""
    problems: list[Problem] = []
    params = data.get("params")
    if overrides and not isinstance(params, dict):
        params = {}
        data["params"] = params
    for key, raw in overrides.items():
        assert isinstance(params, dict)
        if key not in params:
            hint = did_you_mean(key, params)
            declared = ", ".join(map(str, params)) or "none"
            problems.append(
                Problem(
                    file,
                    line_of(lines, ("params",)),
                    f"-p {key}=...: the workflow declares no param {key!r}{hint} (declared: {declared})",
                )
            )
            continue
        if not isinstance(raw, str) or isinstance(params[key], str):
            # already typed (resume passes the recorded values), or a declared string stays
            # a string: `-p tag=1.10` must not become the float 1.1
            params[key] = raw
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        params[key] = value if isinstance(value, str | int | float | bool) else raw
    return problems


def _render(wf: Workflow, file: str, lines: Mapping[Loc, int]) -> tuple[Workflow, list[Problem]]:
    """Substitute ``{{ params.NAME }}`` in commands and env values."""
    problems: list[Problem] = []

    def sub(text: str, loc: Loc) -> str:
        def one(m: re.Match[str]) -> str:
            expr = m.group(1)
            pm = _PARAM.match(expr)
            if not pm:
                problems.append(
                    Problem(
                        file,
                        line_of(lines, loc),
                        f"'{{{{ {expr} }}}}': only '{{{{ params.NAME }}}}' is supported",
                    )
                )
                return m.group(0)
            name = pm.group(1)
            if name not in wf.params:
                hint = did_you_mean(name, wf.params)
                problems.append(
                    Problem(
                        file,
                        line_of(lines, loc),
                        f"'{{{{ params.{name} }}}}' names no param{hint}; declare it under 'params'",
                    )
                )
                return m.group(0)
            value = wf.params[name]
            return str(value).lower() if isinstance(value, bool) else str(value)

        return _TEMPLATE.sub(one, text)

    steps = {}
    for sname, step in wf.steps.items():
        base: Loc = ("steps", sname)
        update: dict[str, Any] = {}
        if step.command is not None:
            update["command"] = tuple(sub(a, (*base, "command", i)) for i, a in enumerate(step.command))
        update["env"] = {k: sub(v, (*base, "env", k)) for k, v in step.env.items()}
        if step.variants is not None:
            update["variants"] = {
                vname: v.model_copy(
                    update={
                        "command": tuple(
                            sub(a, (*base, "variants", vname, "command", i)) for i, a in enumerate(v.command)
                        ),
                        "env": {k: sub(x, (*base, "variants", vname, "env", k)) for k, x in v.env.items()},
                    }
                )
                for vname, v in step.variants.items()
            }
        steps[sname] = step.model_copy(update=update)
    return wf.model_copy(update={"steps": steps}), problems


# --- pydantic errors as file:line messages ---------------------------------------------


def problem_from_error(err: Any, file: str, lines: Mapping[Loc, int], root: type[BaseModel] = Workflow) -> Problem:
    """A pydantic error as ``file:line: what to change``, for any model read from YAML."""
    loc: Loc = tuple(err["loc"])
    where = ".".join(str(x) for x in loc) or "the top level"
    if err["type"] == "extra_forbidden":
        key, parent = str(loc[-1]), ".".join(str(x) for x in loc[:-1]) or "the top level"
        allowed = _allowed_keys(root, loc[:-1])
        msg = f"unknown key {key!r} in {parent}{did_you_mean(key, allowed)}; allowed keys: {', '.join(allowed)}"
    elif err["type"] == "missing":
        parent = ".".join(str(x) for x in loc[:-1]) or "the top level"
        msg = f"{parent}: required key {loc[-1]!r} is missing"
    elif err["type"] == "literal_error" and loc == ("apiVersion",):
        msg = f"apiVersion {err.get('input')!r} is not supported; write 'apiVersion: hetflow/v1'"
    else:
        text = str(err["msg"]).removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None or repr(got) in text else f" (got {got!r})"
        msg = f"{where}: {text}{shown}" if loc else text
    return Problem(file, line_of(lines, loc), msg)


def _allowed_keys(root: type[BaseModel], loc: Loc) -> list[str]:
    """Walk the models along ``loc`` (through lists, tuples and dicts) to list the keys
    allowed there, as written in the file (aliases)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {(f.alias or n): f for n, f in tp.model_fields.items()}
            if str(part) not in fields:
                return []
            tp = fields[str(part)].annotation
        elif typing.get_origin(tp) in (list, tuple, dict):
            tp = typing.get_args(tp)[-1] if typing.get_origin(tp) is dict else typing.get_args(tp)[0]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(f.alias or n) for n, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any) -> Any:
    """``X | None`` -> X; ``Annotated[X, ...]`` -> X."""
    if typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return tp


def did_you_mean(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
