"""Keeps pydantic out of commands that need none of it.

typer (0.2x) coerces a parameter's value through a pydantic ``TypeAdapter`` built on first
use, even a value that is None (its own ``--help`` when not given, an option left out) and a
plain string; so every command imported pydantic and built adapters: about a third of a
second of a `hetflow ps` or `show RUN`, which read the store and print JSON.  ``install``
changes two things, neither of which changes a value: a parameter typed ``bool`` or ``str``
(no custom parser or click type) gets typer's pass-through coercion, which returns a value
of that type unchanged; a ``list[str]`` one (``-p``, ``--variant``) gets the list of the
strings given, as its adapter makes (``_StrList``); a plain ``Path`` one gets ``Path(value)``,
which is what pydantic's ``TypeAdapter(Path)`` makes of a string, then typer's own path checks
(``_PlainPath``: exists, file_okay, resolve_path...); any other parameter builds its adapter
only when a value that is not None comes (None is answered as typer's ``RuntimeParam.coerce``
answers it, before any adapter).  Where typer is laid out otherwise (another version),
nothing is changed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin


class _Deferred:
    """Stands for a parameter's coercion until a value that is not None needs it."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # as typer's RuntimeParam.coerce: no adapter needed
            return () if param.multiple or param.nargs == -1 else None
        return self.build().coerce(value, param=param, ctx=ctx)


class _StrList(_Deferred):
    """A ``list[str]`` parameter: the strings given, in a list (its adapter's answer)."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return list(value)
        return super().coerce(value, param, ctx)


class _PlainPath(_Deferred):
    """A ``Path`` parameter: ``Path(value)``, then typer's checks of the options it was given."""

    def __init__(self, build: Callable[[], Any], check: Callable[..., Any], info: Any) -> None:
        super().__init__(build)
        self.check, self.info = check, info

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str):
            return self.check(Path(value), self.info, path_type=Path, param=param, ctx=ctx)
        return super().coerce(value, param, ctx)


def _no_parser(kind: Any, info: Any) -> bool:
    return (
        getattr(kind, "file_annotation", None) is None
        and getattr(info, "parser", None) is None
        and getattr(info, "click_type", None) is None
    )


def install() -> None:
    """Patch typer's coercion (once) as the module docstring says."""
    try:
        from typer import _coercion, _param_types, core
    except ImportError:  # another typer: its own ways
        return
    passthrough = getattr(_coercion, "PassThroughRuntimeParam", None)
    check_path = getattr(_param_types, "coerce_cli_path", None)
    parameter: Any = getattr(core, "_TyperParameter", None)
    original = getattr(parameter, "get_runtime_param", None)
    if passthrough is None or original is None or getattr(original, "hetflow_patched", False):
        return

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", "absent") is not None:
            return original(self)
        kind: Any = getattr(self, "type_descriptor", None)
        info = getattr(kind, "parameter_info", None)
        annotation = getattr(kind, "annotation", None)
        if kind is not None and annotation in (bool, str) and _no_parser(kind, info):
            self._runtime_param = passthrough(annotation=annotation, parameter_info=info)
            return self._runtime_param
        if (
            kind is not None
            and get_origin(annotation) is list
            and get_args(annotation) == (str,)
            and _no_parser(kind, info)
        ):
            return _StrList(lambda: original(self))
        if annotation is Path and check_path is not None and _no_parser(kind, info):
            return _PlainPath(lambda: original(self), check_path, info)
        return _Deferred(lambda: original(self))

    get_runtime_param.hetflow_patched = True  # type: ignore[attr-defined]
    parameter.get_runtime_param = get_runtime_param
