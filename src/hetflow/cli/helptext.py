"""Help as docker, kubectl and Slurm users read it: ``FILE``, ``RUN``, ``NAME=VALUE``, no tag on a flag.

typer 0.29 prints a parameter's Python type as a parser tag (``<bool>``, ``<str>``,
``<list[str]>``) and a required argument as ``{file}`` in the usage line (typer/core.py:
``_TyperParameter.display_type``, ``TyperOption.display_type_rich``,
``TyperArgument._usage_display_name``, ``display_name_raw``); typers before it, built on click, printed click's
metavars (``FILE``, ``TEXT``, nothing on a flag).  hetflow's commands give an option that takes
a value a metavar where the name says something (``-p NAME=VALUE``, ``RUN``); ``plain_help()``
makes typer show those, no type on a flag, a shared parameter's name from ``METAVARS`` or
else its name in capitals where it has no metavar, and arguments as click writes them
(``FILE`` required, ``[STEP]`` optional).

It changes how help is displayed, nothing that is parsed, and only where typer has those
methods: on a typer without them click's own metavars show, which carry no tags either.
tests/unit/test_cli_habits.py reads every command's --help for tags, so a typer that renames
the methods fails there rather than in front of a user.
"""

from __future__ import annotations

from typing import Any

from typer import core

# The value of a parameter that several commands share, named once so that every command
# says it alike (`hetflow run -p NAME=VALUE` as `hetflow plan -p NAME=VALUE`); a metavar
# given where the parameter is declared wins.
METAVARS = {"param": "NAME=VALUE", "variant": "STEP=NAME", "run_id": "RUN"}


def plain_help() -> None:
    """Install the display of this module's docstring on typer's parameter classes (idempotent)."""
    option, argument = getattr(core, "TyperOption", None), getattr(core, "TyperArgument", None)
    if option is None or argument is None:
        return
    if hasattr(option, "display_type_rich"):
        setattr(option, "display_type_rich", _option_type)  # noqa: B010 (mypy refuses assigning a method)
    if hasattr(argument, "display_type_rich"):
        setattr(argument, "display_type_rich", _argument_type)  # noqa: B010
    if hasattr(argument, "_usage_display_name"):
        setattr(argument, "_usage_display_name", _argument_usage)  # noqa: B010
    if hasattr(argument, "display_name_raw"):
        setattr(argument, "display_name_raw", property(_argument_name))  # noqa: B010


# The replacements take whatever a later typer passes (``*_``): a changed call shows
# hetflow's names still, or typer's own where the method is gone, never a crash.


def _option_type(self: Any, *_: Any, **__: Any) -> str | None:
    """The value an option takes: its metavar, else its name in capitals; none for a flag."""
    if self.is_flag or self.count:
        return None
    if self.metavar is not None:
        return str(self.metavar)
    name = METAVARS.get(self.name, str(self.name or "value").upper())
    return name + "..." if self.nargs != 1 else name


def _argument_type(self: Any, *_: Any, **__: Any) -> str | None:
    """None: the help's first column already names an argument by its metavar."""
    return None


def _argument_name(self: Any) -> str:
    """An argument's metavar, else its name in capitals, as click names it (click/core.py Argument.make_metavar)."""
    if self.metavar is not None:
        return str(self.metavar)
    return METAVARS.get(self.name, str(self.name or "arg").upper())


def _argument_usage(self: Any, *_: Any, **__: Any) -> str:
    """``FILE``, ``[STEP]``, ``FILES...``: click's usage for an argument."""
    name = _argument_name(self)
    if not self.required:
        name = f"[{name}]"
    return name + "..." if self.nargs != 1 else name
