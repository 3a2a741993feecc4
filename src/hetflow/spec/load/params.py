"""Workflow params: ``-p key=value`` overrides, and ``{{ params.NAME }}`` substituted in
every field that takes templates (``spec.source.templated``: image, command, env, inputs, outputs,
publish targets; ``{{ item }}``/``{{ index }}`` are left for a fan-out's items).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

import yaml

from hetflow.errors import Problem
from hetflow.spec.expansion.fanout import is_fanout
from hetflow.spec.load.overrides import Origin
from hetflow.spec.models import ParamValue, Workflow
from hetflow.spec.source.problems import did_you_mean
from hetflow.spec.source.templated import templated_fields
from hetflow.spec.source.yamlfile import Loc, line_of

_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PARAM = re.compile(r"^params\.([A-Za-z_][A-Za-z0-9_-]*)$")
_ITEM_EXPR = re.compile(r"^(item(\.[A-Za-z_][A-Za-z0-9_-]*)?|index)$")


def apply_overrides(
    data: dict[str, Any],
    overrides: Mapping[str, object],
    file: str,
    lines: Mapping[Loc, int],
    origins: Mapping[str, Origin] | None = None,
) -> list[Problem]:
    """``-p key=value`` replaces a declared param; the value is read as a YAML scalar so
    ``-p size=128`` stays a number.  A value typed already (a params file's, a settings
    file's, the recorded ones a resume passes) is taken as it is.  ``origins``: where a
    value was written, for the message when the workflow declares no such param (an
    ``optional`` one, from a settings file, is skipped with a note)."""
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
            origin = (origins or {}).get(key)
            if origin is None or not origin.file:
                problems.append(
                    Problem(
                        file,
                        line_of(lines, ("params",)),
                        f"-p {key}=...: the workflow declares no param {key!r}{hint} (declared: {declared})",
                    )
                )
            else:
                part = f"{origin.part}: " if origin.part else ""
                what = "skipped" if origin.optional else f"remove it there, or declare it under 'params' in {file}"
                problems.append(
                    Problem(
                        origin.file,
                        origin.line,
                        f"{part}param {key!r}: workflow {file} declares no param {key!r}{hint}"
                        f" (declared: {declared}); {what}",
                        "note" if origin.optional else "error",
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
        if isinstance(params[key], list) and isinstance(value, list):
            params[key] = value  # -p samples='[a, b]' for a list param
        else:
            params[key] = value if isinstance(value, str | int | float | bool) else raw
    return problems


def _one_expression(expr: str, params: Mapping[str, ParamValue], fanout: bool) -> tuple[str | None, str | None]:
    """What ``{{ expr }}`` becomes (None: it stays as written) and the problem with it, if any."""
    pm = _PARAM.match(expr)
    if not pm:
        if _ITEM_EXPR.match(expr):
            if fanout:
                return None, None  # a pending fan-out: filled in when its list is known
            return None, f"'{{{{ {expr} }}}}' is only defined in a step with 'foreach' or 'matrix'"
        head = expr.split(".", 1)[0]
        hint = "" if head == "params" else did_you_mean(head, ("item", "index"))
        if head in params:
            return None, f"'{{{{ {expr} }}}}' names nothing; params are written '{{{{ params.{head} }}}}'"
        return None, (
            f"'{{{{ {expr} }}}}' names nothing{hint}; "
            "write '{{ params.NAME }}', or in a fan-out step '{{ item }}', '{{ item.FIELD }}' "
            "or '{{ index }}'"
        )
    name = pm.group(1)
    if name not in params:
        hint = did_you_mean(name, params)
        return None, f"'{{{{ params.{name} }}}}' names no param{hint}; declare it under 'params'"
    value = params[name]
    if isinstance(value, list):
        return None, f"'{{{{ params.{name} }}}}' is a list; iterate it with foreach: '{{{{ params.{name} }}}}'"
    return (str(value).lower() if isinstance(value, bool) else str(value)), None


def render_params(wf: Workflow, file: str, lines: Mapping[Loc, int]) -> tuple[Workflow, list[Problem]]:
    """Substitute ``{{ params.NAME }}`` in every templated field of every step
    (``spec.source.templated``) and in the workflow's own ``publish`` targets; an unknown param, or
    ``{{ item }}`` outside a fan-out, is a problem at the line it was written."""
    problems: list[Problem] = []

    def sub(text: str, loc: Loc, fanout: bool) -> str:
        def one(m: re.Match[str]) -> str:
            out, problem = _one_expression(m.group(1), wf.params, fanout)
            if problem is not None:
                problems.append(Problem(file, line_of(lines, loc), problem))
            return m.group(0) if out is None else out

        if "{{" not in text:
            return text
        if "{{" in _TEMPLATE.sub("", text):
            problems.append(
                Problem(
                    file,
                    line_of(lines, loc),
                    f"{text[:60]!r} opens '{{{{' without a matching '}}}}'; close it, e.g. '{{{{ params.NAME }}}}'",
                )
            )
            return text
        return _TEMPLATE.sub(one, text)

    steps = {
        sname: step.model_copy(update=templated_fields(step, ("steps", sname), partial(sub, fanout=is_fanout(step))))
        for sname, step in wf.steps.items()
    }
    publish = tuple(
        p.model_copy(update={"to": sub(p.to, ("publish", i, "to"), _fans_out(wf, p.from_))})
        for i, p in enumerate(wf.publish)
    )
    targets: list[tuple[Loc, str]] = [(("publish", i), p.to) for i, p in enumerate(publish)]
    targets += [(("steps", n, "publish", i), p.to) for n, s in steps.items() for i, p in enumerate(s.publish)]
    problems += [
        Problem(file, line_of(lines, loc), "the publish target is empty once filled in; give a directory or s3://")
        for loc, to in targets
        if not to.strip()
    ]
    return wf.model_copy(update={"steps": steps, "publish": publish}), problems


def _fans_out(wf: Workflow, ref: str) -> bool:
    """Whether the step a workflow-level publish reads from (``from: STEP/OUTPUT``) fans out:
    its items then fill ``{{ item }}`` in the target."""
    step = wf.steps.get(ref.split("/", 1)[0])
    return step is not None and is_fanout(step)
