"""Problems as ``file:line: what to change``: pydantic's errors for any model read from
YAML (the allowed keys listed, a close one suggested), and ``did_you_mean``.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel

from hetflow.errors import Problem
from hetflow.spec.models import Workflow
from hetflow.spec.source.yamlfile import Loc, line_of


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
