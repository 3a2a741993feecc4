"""Fan-out: a step with ``foreach`` or ``matrix`` becomes one step per item.

Item ``i`` of step ``X`` is the step ``X.i`` (step names have no dots, so the name says
where it came from).  Each item's command, env, inputs, outputs, image and publish
targets get ``{{ item }}``, ``{{ item.FIELD }}`` and ``{{ index }}``; a step that needs
``X`` needs every item, and an input ``{k: X/OUT}`` gathers every item's OUT under
``/in/k/<i>/OUT``.

Lists known when the file is read (a list, a range, a list param, a matrix) are expanded
by the loader.  Lists that need I/O stay a single *pending* step until they are known:
``{files: data.NAME}`` and ``{lines: data.NAME}`` when the run is submitted (the data is
listed then), ``{files: STEP/OUT}`` and ``{lines: STEP/OUT}`` when STEP has succeeded (the
runner reads its output, expands, and records the items so a resume expands alike).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hetflow.errors import Problem
from hetflow.spec.expansion.matrix import matrix_axes
from hetflow.spec.fields.naming import DATA_PREFIX, FANOUT_SEP
from hetflow.spec.models import Step, Workflow
from hetflow.spec.source.templated import templated_fields

Loc = tuple[str | int, ...]
LineOf = Callable[[Loc], int]
Item = Any  # a scalar, or a mapping of scalars

_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_ITEM = re.compile(r"^(item(?:\.([A-Za-z_][A-Za-z0-9_-]*))?|index)$")
_PARAM_ONLY = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}$")
MAX_FANOUT_ITEMS = 100_000  # items of one fan-out, checked before listing (range, matrix) and while reading


@dataclass(frozen=True)
class Source:
    """Where a pending fan-out's list comes from: ``kind`` files|lines, ``ref`` data.NAME[/P] or STEP/OUT."""

    kind: str
    ref: str

    @property
    def step(self) -> str | None:
        """The upstream step the list is read from (None: workflow data)."""
        return None if self.ref.startswith(DATA_PREFIX) else self.ref.split("/", 1)[0]


def pending_source(step: Step) -> Source | None:
    """A step's fan-out source when its list is only known at submit or run time."""
    f = step.foreach
    if isinstance(f, dict) and len(f) == 1:
        kind, ref = next(iter(f.items()))
        if kind in ("files", "lines") and isinstance(ref, str):
            return Source(kind, ref)
    return None


def is_fanout(step: Step) -> bool:
    return step.foreach is not None or step.matrix is not None


# --- items known when the file is read ---------------------------------------------------


def static_items(
    name: str, step: Step, params: Mapping[str, Any], file: str, line_of: LineOf
) -> tuple[list[Item] | None, list[Problem]]:
    """The items of a fan-out known now; (None, []) for a pending one; problems for a bad one."""
    base: Loc = ("steps", name)
    if step.foreach is not None and step.matrix is not None:
        return None, [
            Problem(file, line_of((*base, "matrix")), f"step {name!r} has both 'foreach' and 'matrix'; keep one")
        ]
    if step.matrix is not None:
        axes, problems = matrix_axes(name, step.matrix, params, file, line_of)
        if axes is None:
            return None, problems
        size = axes.size()  # computed: a matrix is listed only once it is known to fit
        if size > MAX_FANOUT_ITEMS:
            return None, [too_many(name, size, file, line_of((*base, "matrix")))]
        return axes.items(), []
    f = step.foreach
    where = line_of((*base, "foreach"))
    if isinstance(f, list):
        return _checked_items(name, f, file, where)
    if isinstance(f, str):
        m = _PARAM_ONLY.match(f)
        if not m:
            return None, [
                Problem(
                    file,
                    where,
                    f"foreach of step {name!r} is the string {f!r}; give a list, {{range: N}}, "
                    "'{{ params.NAME }}' (a list param), {files: REF} or {lines: REF}",
                )
            ]
        pname = m.group(1)
        if pname not in params:
            return None, [
                Problem(file, where, f"foreach of step {name!r} names no param {pname!r}; declare it under 'params'")
            ]
        value = params[pname]
        if not isinstance(value, list):
            return None, [
                Problem(
                    file,
                    where,
                    f"foreach of step {name!r}: param {pname!r} is {value!r}, not a list; "
                    f"declare it as a list, e.g. {pname}: [a, b, c]",
                )
            ]
        return _checked_items(name, value, file, where)
    if isinstance(f, dict) and len(f) == 1:
        kind, arg = next(iter(f.items()))
        if kind == "range":
            return _range(name, arg, file, where)
        if kind in ("files", "lines"):
            return _source_problems(name, kind, arg, file, where)
    return None, [
        Problem(
            file,
            where,
            f"foreach of step {name!r} is {f!r}, not a list; give a list, {{range: N}}, "
            "'{{ params.NAME }}', {files: REF} or {lines: REF}",
        )
    ]


def _checked_items(name: str, items: list[Any], file: str, line: int) -> tuple[list[Item] | None, list[Problem]]:
    if len(items) > MAX_FANOUT_ITEMS:
        return None, [too_many(name, len(items), file, line)]
    for x in items:
        ok = isinstance(x, str | int | float | bool) or (
            isinstance(x, dict) and all(isinstance(v, str | int | float | bool) for v in x.values())
        )
        if not ok:
            return None, [
                Problem(file, line, f"foreach item {x!r} of step {name!r} is not a value or a mapping of values")
            ]
    return list(items), []


def too_many(name: str, size: int, file: str, line: int) -> Problem:
    return Problem(file, line, f"step {name!r} fans out to {size} items; at most {MAX_FANOUT_ITEMS}")


def _range(name: str, arg: Any, file: str, line: int) -> tuple[list[Item] | None, list[Problem]]:
    args = [arg] if isinstance(arg, int) and not isinstance(arg, bool) else arg
    if (
        not isinstance(args, list)
        or not 1 <= len(args) <= 3
        or not all(isinstance(a, int) and not isinstance(a, bool) for a in args)
        or (len(args) == 3 and args[2] == 0)
    ):
        return None, [
            Problem(
                file, line, f"foreach range of step {name!r} is {arg!r}; write range: N or range: [START, STOP, STEP]"
            )
        ]
    size = len(range(*args))  # range arithmetic: nothing is listed before it is known to fit
    if size > MAX_FANOUT_ITEMS:
        return None, [too_many(name, size, file, line)]
    return list(range(*args)), []


def _source_problems(name: str, kind: str, ref: Any, file: str, line: int) -> tuple[None, list[Problem]]:
    if not isinstance(ref, str) or not ref or (not ref.startswith(DATA_PREFIX) and "/" not in ref):
        return None, [
            Problem(
                file,
                line,
                f"foreach {kind} of step {name!r} is {ref!r}; give data.NAME (workflow data) or STEP/OUTPUT",
            )
        ]
    return None, []


# --- expansion ----------------------------------------------------------------------------


def expand(
    wf: Workflow, known: Mapping[str, Sequence[Item]], file: str, line_of: LineOf
) -> tuple[Workflow, list[Problem]]:
    """Replace each fan-out step in ``known`` with its items and point its dependents at
    them.  Steps not in ``known`` are left as they are."""
    if not known:
        return wf, []
    problems: list[Problem] = []
    steps: dict[str, Step] = {}
    for name, step in wf.steps.items():
        if name not in known:
            steps[name] = step
            continue
        if len(known[name]) > MAX_FANOUT_ITEMS:
            problems.append(too_many(name, len(known[name]), file, line_of(("steps", name, "foreach"))))
            return wf, problems
        for i, item in enumerate(known[name]):
            steps[f"{name}{FANOUT_SEP}{i}"] = _item_step(name, step, item, i, file, line_of, problems)
    counts = {name: len(items) for name, items in known.items()}
    steps = {name: _retarget(step, counts) for name, step in steps.items()}
    return wf.model_copy(update={"steps": steps}), problems


def expand_static(wf: Workflow, file: str, line_of: LineOf) -> tuple[Workflow, list[Problem], dict[str, list[Item]]]:
    """Expand every fan-out whose list is known when the file is read; also the items, by
    step (recorded with a run, so that each item's values can be shown)."""
    known: dict[str, list[Item]] = {}
    problems: list[Problem] = []
    for name, step in wf.steps.items():
        if not is_fanout(step):
            continue
        items, found = static_items(name, step, wf.params, file, line_of)
        problems += found
        if items is not None:
            known[name] = items
    if problems:
        return wf, problems, {}
    expanded, problems = expand(wf, known, file, line_of)
    return expanded, problems, known


def _item_step(
    name: str, step: Step, item: Item, index: int, file: str, line_of: LineOf, problems: list[Problem]
) -> Step:
    base: Loc = ("steps", name)

    def sub(text: str, loc: Loc, literal: bool = False) -> str:
        """``literal``: values as a condition's literals (strings quoted: spec.when)."""
        show = _literal if literal else _text

        def one(m: re.Match[str]) -> str:
            expr = m.group(1)
            im = _ITEM.match(expr)
            if not im:
                return m.group(0)  # params.* and mistakes: the loader's renderer reports those
            if expr == "index":
                return str(index)
            field = im.group(2)
            if field is None:
                if isinstance(item, dict):
                    problems.append(
                        Problem(
                            file,
                            line_of(loc),
                            f"'{{{{ item }}}}' of step {name!r} is a mapping ({', '.join(item)}); "
                            "use '{{ item.FIELD }}'",
                        )
                    )
                    return m.group(0)
                return show(item)
            if not isinstance(item, dict) or field not in item:
                have = ", ".join(f"item.{k}" for k in item) if isinstance(item, dict) else "item (a value)"
                problems.append(
                    Problem(file, line_of(loc), f"'{{{{ item.{field} }}}}' of step {name!r}: the items have {have}")
                )
                return m.group(0)
            return show(item[field])

        return _TEMPLATE.sub(one, text) if "{{" in text else text

    update: dict[str, Any] = {"foreach": None, "matrix": None}
    update |= templated_fields(step, base, sub, when=lambda text, loc: sub(text, loc, literal=True))
    return step.model_copy(update=update)


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _literal(value: Any) -> str:
    """An item's value as a literal of a condition (``spec.validate.when``): a string quoted."""
    return repr(value) if isinstance(value, str) else _text(value)


def _retarget(step: Step, counts: Mapping[str, int]) -> Step:
    """Point ``needs`` and inputs at expanded steps' items: ``needs: [X]`` -> every X.i;
    ``{k: X/OUT}`` -> ``{k/i: X.i/OUT}`` (mounted at /in/k/i/OUT)."""
    if not any(d in counts for d in step.dependencies()):
        return step
    needs: list[str] = []
    for d in step.needs:
        needs += [f"{d}{FANOUT_SEP}{i}" for i in range(counts[d])] if d in counts else [d]
    inputs: dict[str, str] = {}
    for key, ref in step.inputs.items():
        parent, _, rest = ref.partition("/")
        if parent in counts and not ref.startswith(DATA_PREFIX):
            for i in range(counts[parent]):
                inputs[f"{key}/{i}"] = f"{parent}{FANOUT_SEP}{i}/{rest}"
        else:
            inputs[key] = ref
    return step.model_copy(update={"needs": tuple(needs), "inputs": inputs})


# --- items of a pending fan-out, once its source is readable ---------------------------------


def file_items(ref: str, relpaths: Sequence[str]) -> list[dict[str, str]]:
    """``{files: REF}`` items: ``name`` (file name), ``stem`` (without its last suffix),
    ``rel`` (path under REF) and ``path`` (REF/rel, usable as an input)."""
    items = []
    for rel in sorted(relpaths):
        base = posixpath.basename(rel)
        stem = base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base
        items.append({"name": base, "stem": stem, "rel": rel, "path": f"{ref.rstrip('/')}/{rel}"})
    return items
