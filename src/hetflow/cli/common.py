"""What the commands share: consoles, the store, parsing -p, printing problems.

The consoles are made on first use (``LazyConsole``), and the store's module imported when it
is opened: a shell's TAB, answered by typer from the command tree, imports neither rich nor
the store (``hetflow logs RUN <TAB>`` only the store)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hetflow.config import hetflow_home
from hetflow.errors import Problem, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from hetflow.spec import Origin, Workflow
    from hetflow.state import Store


class LazyConsole:
    """A rich ``Console`` made at its first use (rich's import is a fifth of a TAB's time)."""

    def __init__(self, *, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            # Off a terminal rich would wrap tables at 80 columns; logs and pipes read better unwrapped.
            tty = (sys.stderr if self._stderr else sys.stdout).isatty()
            self._console = Console(stderr=self._stderr, width=None if tty else 200)
        return getattr(self._console, name)


console = cast("Console", LazyConsole(stderr=False))
err = cast("Console", LazyConsole(stderr=True))


def open_store() -> Store:
    from hetflow.state import Store

    return Store(hetflow_home() / "state.db")


def parse_params(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if "\x00" in item:
            raise UsageError(f"-p {item!r}: a NUL byte cannot be passed to a command; remove it")
        if not sep or not key.strip():
            raise UsageError(f"-p {item!r}: write -p NAME=VALUE, e.g. -p size=1024")
        out[key.strip()] = value
    return out


PARAMS_FILE_HELP = "Params from a YAML or JSON mapping, NAME: VALUE; -p wins over it (docs/guides/profiles.md)."


def gather_params(
    param: Iterable[str],
    params_file: Path | None,
    settings_params: Mapping[str, Any] | None = None,
    settings_origins: Mapping[str, Origin] | None = None,
) -> tuple[dict[str, object], dict[str, Origin]]:
    """The params to load a workflow with, and where each was written: the settings file and
    its profiles < ``--params-file`` < ``-p`` (``hetflow.execute.layer_params``)."""
    from hetflow.execute import layer_params, read_params_file

    cli = parse_params(param)
    from_file = read_params_file(params_file) if params_file is not None else None
    return layer_params(settings_params or {}, settings_origins or {}, from_file, cli)


MAX_NOTES = 20  # every error is printed; of the notes (a big fan-out repeats one), this many


def print_problems(problems: Iterable[Problem]) -> None:
    from rich.markup import escape

    notes = 0
    for p in problems:
        if p.severity != "error":
            notes += 1
            if notes > MAX_NOTES:
                continue
        style = "red" if p.severity == "error" else "yellow"
        # escaped: a message quotes what the user wrote, and '[@DIGEST]' is not rich markup
        err.print(f"[{style}]{escape(f'{p.file}:{p.line}: {p.severity}:')}[/] {escape(p.message)}", highlight=False)
    if notes > MAX_NOTES:
        err.print(f"[yellow]... and {notes - MAX_NOTES} more note(s); 'hetflow validate --json' lists them all[/]")


JSON_INDENT_BELOW = 1 << 20  # bytes: a bigger document is written compact


def print_json(data: Any) -> None:
    """``data`` as JSON, indented for a person to read; a document of a megabyte or more (ps
    or show of 10,000-step runs) compact, as json's C encoder writes it: indented, json
    encodes in Python, about ten times slower (0.7 s of a 1.0 s `ps --all --json`)."""
    text = json.dumps(data, default=str)
    if len(text) < JSON_INDENT_BELOW:
        text = json.dumps(data, indent=2, default=str)
    sys.stdout.write(text + "\n")


def known_secrets(workflow: Workflow) -> None:
    """Mask in this process's output what it knows of the workflow's secrets (a reader needs none)."""
    from hetflow.execute import activate, gather_available

    activate(gather_available({n for s in workflow.steps.values() for n in s.secrets}, os.environ))
