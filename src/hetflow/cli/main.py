"""The ``hetflow`` command.  Each command parses, calls a stage, prints; no logic here.

Errors a user can cause are HetflowErrors: printed as one clear message, non-zero exit,
no traceback.  This module stays light (no typer, rich or store): a bash completion of the
first word is answered from ``COMMANDS`` at once; everything else goes to the typer app
(``hetflow.cli.app``), imported then.  ``app`` and ``register_commands`` are its names, read
through this module too."""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from hetflow.cli.commands import BAD_INPUT, COMMANDS, OWN_COMMANDS, VERSION_FLAGS
from hetflow.codecache import kept_compiles
from hetflow.config import check_environment
from hetflow.errors import HetflowError, SpecError, UsageError
from hetflow.lazy import no_cyclic_gc
from hetflow.probecache import PydanticPluginTable

__all__ = ["BAD_INPUT", "COMMANDS", "INTERNAL", "OWN_COMMANDS", "VERSION_FLAGS", "first_word_completion", "main"]
INTERNAL = 70  # EX_SOFTWARE (sysexits.h): a bug in hetflow, never the user's input
COMPLETE_VAR = "_HETFLOW_COMPLETE"  # as hetflow.cli.shell's
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*|")


def first_word_completion(environ: Mapping[str, str]) -> list[str] | None:
    """``hetflow <TAB>`` in bash: the visible command names starting with what is typed, from
    ``COMMANDS`` (typer's bash answer is the names alone, one a line); None for any other
    request (a later word, an option, a quote, zsh or fish, which show each command's help:
    typer answers those, ``hetflow.cli.shell``)."""
    if environ.get(COMPLETE_VAR) not in ("complete_bash", "bash_complete") or environ.get("COMP_CWORD") != "1":
        return None
    try:
        words = shlex.split(environ.get("COMP_WORDS", ""))
    except ValueError:  # an open quote: typer's splitting decides
        return None
    typed = words[1] if len(words) > 1 else ""
    if len(words) > 2 or not _PLAIN.fullmatch(typed):
        return None
    names = [n for n in (*OWN_COMMANDS, *(n for ns in COMMANDS.values() for n in ns)) if not n.startswith("_")]
    return [n for n in names if n.startswith(typed)]


def main(argv: list[str] | None = None) -> None:
    """Run one command; exit 0, 1 (a run failed), 2 (bad input or environment) or 70 (a bug)."""
    args = sys.argv[1:] if argv is None else argv
    names = first_word_completion(os.environ)
    if names is not None:
        sys.stdout.write("\n".join(names))
        return
    command = next((a for a in args if not a.startswith("-")), "")
    with kept_compiles(command=command):  # dataclass methods and regular expressions, compiled once and kept
        _run(args)


def _run(args: list[str]) -> None:
    with no_cyclic_gc():
        from hetflow.cli.common import err, print_problems
        from hetflow.cli.shell import completion_words

    PydanticPluginTable.install()
    try:
        if any("\x00" in a for a in args):
            raise UsageError("an argument holds a NUL byte; remove it")
        check_environment()
        words = completion_words(os.environ)  # a shell asking for completions, which names no command in args
        with no_cyclic_gc():  # typer, rich, the store and the command's module
            from hetflow.cli.app import app, register_commands

            register_commands(args if words is None else words)
        app(args=args, prog_name="hetflow")
    except SpecError as exc:
        print_problems(exc.problems)
        sys.exit(exc.exit_code)
    except HetflowError as exc:
        from rich.markup import escape

        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # the last guard: a user never sees a traceback
        if os.environ.get("HETFLOW_DEBUG"):
            raise
        from rich.markup import escape

        err.print(
            f"[red]internal error:[/] {escape(type(exc).__name__)}: {escape(str(exc)[:300])} "
            "(a bug in hetflow: please report it; HETFLOW_DEBUG=1 shows the traceback)",
            highlight=False,
        )
        sys.exit(INTERNAL)


def __getattr__(name: str) -> Any:
    """``app``, ``register_commands`` and the rest of the typer app, from ``hetflow.cli.app``."""
    if name.startswith("__"):
        raise AttributeError(name)
    from hetflow.cli import app

    try:
        return getattr(app, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


if __name__ == "__main__":
    main()
