"""Keeps pydantic out of commands that need none of it.

typer (0.2x) coerces a parameter's value through a pydantic ``TypeAdapter`` built on first
use, even a value that is None (its own ``--help`` when not given, an option left out) and a
plain string; so every command imported pydantic and built adapters: about a third of a
second of a `hetflow ps` or `show RUN`, which read the store and print JSON.  ``install``
changes two things, neither of which changes a value: a parameter typed ``bool`` or ``str``
(no custom parser or click type) gets typer's pass-through coercion, which returns a value
of that type unchanged; any other parameter builds its adapter only when a value that is not
None comes (None is answered as typer's ``RuntimeParam.coerce`` answers it, before any
adapter).  Where typer is laid out otherwise (another version), nothing is changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _Deferred:
    """Stands for a parameter's coercion until a value that is not None needs it."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # as typer's RuntimeParam.coerce: no adapter needed
            return () if param.multiple or param.nargs == -1 else None
        return self.build().coerce(value, param=param, ctx=ctx)


def install() -> None:
    """Patch typer's coercion (once) as the module docstring says."""
    try:
        from typer import _coercion, core
    except ImportError:  # another typer: its own ways
        return
    passthrough = getattr(_coercion, "PassThroughRuntimeParam", None)
    parameter: Any = getattr(core, "_TyperParameter", None)
    original = getattr(parameter, "get_runtime_param", None)
    if passthrough is None or original is None or getattr(original, "hetflow_patched", False):
        return

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", "absent") is not None:
            return original(self)
        kind: Any = getattr(self, "type_descriptor", None)
        info = getattr(kind, "parameter_info", None)
        plain = (
            kind is not None
            and kind.annotation in (bool, str)
            and getattr(kind, "file_annotation", None) is None
            and getattr(info, "parser", None) is None
            and getattr(info, "click_type", None) is None
        )
        if plain:
            self._runtime_param = passthrough(annotation=kind.annotation, parameter_info=info)
            return self._runtime_param
        return _Deferred(lambda: original(self))

    get_runtime_param.hetflow_patched = True  # type: ignore[attr-defined]
    parameter.get_runtime_param = get_runtime_param
