"""A ``matrix:`` fan-out: its axes (lists, or list params), its exclusions, how many items it
makes and the items themselves.

The size is computed, never listed (issue 37: a matrix of 10^8 combinations was listed in
full, taking minutes and gigabytes, before the fan-out limit refused it): without exclusions it
is the product of the axes' lengths; with them, a walk over the axes that branches only on the
values some exclusion still in play names (every other value goes down one branch, weighted by
how many there are), memoised on (axis, exclusions in play).  The items are listed only once
the size is known to be within the limit, in the order of ``itertools.product`` (an item's
index is its name: ``X.i``), skipping every branch the count says is empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetflow.errors import Problem

LineOf = Callable[[tuple[str | int, ...]], int]
_PARAM_ONLY = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_-]*)\s*\}\}$")
_SCALAR = str | int | float | bool


@dataclass(frozen=True)
class Axes:
    """A checked matrix: axis names, each axis's values, and the exclusions as
    {axis index: value} (an exclusion naming a value no axis can hold is dropped)."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    exclude: tuple[Mapping[int, Any], ...]
    _counted: dict[tuple[int, frozenset[int]], int] = field(default_factory=dict, compare=False, repr=False)

    def size(self) -> int:
        """How many items the matrix makes, exclusions taken out."""
        return self._count(0, self._all())

    def items(self) -> list[dict[str, Any]]:
        """Every item, as a mapping of the axes, in ``itertools.product`` order."""
        return [dict(zip(self.names, combo, strict=True)) for combo in self._walk(0, self._all(), ())]

    def _all(self) -> frozenset[int]:
        return frozenset(range(len(self.exclude)))

    def _survivors(self, live: frozenset[int], axis: int, value: Any) -> frozenset[int]:
        """The exclusions still in play once ``axis`` holds ``value``."""
        return frozenset(j for j in live if axis not in self.exclude[j] or self.exclude[j][axis] == value)

    def _count(self, axis: int, live: frozenset[int]) -> int:
        """Items under a branch: ``axis`` and the ones after it still to choose, ``live`` the
        exclusions every value chosen so far matched."""
        key = (axis, live)
        if key not in self._counted:
            self._counted[key] = self._count_now(axis, live)
        return self._counted[key]

    def _count_now(self, axis: int, live: frozenset[int]) -> int:
        if any(all(a < axis for a in self.exclude[j]) for j in live):
            return 0  # an exclusion matched every axis it names
        if axis == len(self.values) or not live:
            return math.prod(len(v) for v in self.values[axis:])
        values = self.values[axis]
        named = {self.exclude[j][axis] for j in live if axis in self.exclude[j]}
        others = sum(1 for v in values if v not in named)
        total = others * self._count(axis + 1, frozenset(j for j in live if axis not in self.exclude[j]))
        for v in named:
            total += values.count(v) * self._count(axis + 1, self._survivors(live, axis, v))
        return total

    def _walk(self, axis: int, live: frozenset[int], prefix: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        if self._count(axis, live) == 0:
            return
        if axis == len(self.values):
            yield prefix
            return
        for v in self.values[axis]:
            yield from self._walk(axis + 1, self._survivors(live, axis, v), (*prefix, v))


def matrix_axes(
    name: str, matrix: Mapping[str, Any], params: Mapping[str, Any], file: str, line_of: LineOf
) -> tuple[Axes | None, list[Problem]]:
    """The matrix of step ``name`` checked, its list params read; problems for a bad one."""
    matrix = _with_params(matrix, params)
    where = line_of(("steps", name, "matrix"))
    axes = {k: v for k, v in matrix.items() if k != "exclude"}
    exclude = matrix.get("exclude", [])
    problems = []
    if not axes:
        problems.append(
            Problem(file, where, f"matrix of step {name!r} has no axes; give e.g. {{size: [1, 2], model: [a, b]}}")
        )
    for axis, values in axes.items():
        if not isinstance(values, list) or not values or not all(isinstance(v, _SCALAR) for v in values):
            problems.append(
                Problem(
                    file,
                    line_of(("steps", name, "matrix", axis)),
                    f"matrix axis {axis!r} of step {name!r} is {values!r}; give a non-empty list of values"
                    + (" (or a param declared as a list)" if isinstance(values, str) and "params." in values else ""),
                )
            )
    if not isinstance(exclude, list) or not all(isinstance(e, dict) for e in exclude):
        problems.append(
            Problem(
                file, where, f"matrix exclude of step {name!r} must be a list of mappings, e.g. [{{size: 1, model: a}}]"
            )
        )
    else:
        for e in exclude:
            unknown = [k for k in e if k not in axes]
            if unknown:
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "matrix", "exclude")),
                        f"matrix exclude of step {name!r} names unknown axis {unknown[0]!r} (axes: {', '.join(axes)})",
                    )
                )
    if problems:
        return None, problems
    index = {axis: i for i, axis in enumerate(axes)}
    kept = [e for e in exclude if all(isinstance(v, _SCALAR) for v in e.values())]  # a list value matches nothing
    return Axes(
        tuple(axes), tuple(tuple(v) for v in axes.values()), tuple({index[k]: v for k, v in e.items()} for e in kept)
    ), []


def _with_params(matrix: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """A matrix whose axes may be list params (``lr: '{{ params.lrs }}'``, so a sweep is set
    from the command line: ``-p lrs='[0.1, 0.01]'``); an unknown or scalar param is left as
    written for ``matrix_axes`` to refuse."""
    out = dict(matrix)
    for axis, values in matrix.items():
        m = _PARAM_ONLY.match(values) if isinstance(values, str) else None
        if m and isinstance(params.get(m.group(1)), list):
            out[axis] = params[m.group(1)]
        elif isinstance(values, list) and axis != "exclude":  # a value that is a scalar param, as its value
            out[axis] = [_param_value(v, params) for v in values]
    return out


def _param_value(value: Any, params: Mapping[str, Any]) -> Any:
    m = _PARAM_ONLY.match(value) if isinstance(value, str) else None
    found = params.get(m.group(1)) if m else None
    return found if isinstance(found, str | int | float | bool) else value
