"""Shell completion: ``hetflow completion bash|zsh|fish`` prints the script, as ``kubectl completion bash`` does.

The script calls hetflow back with ``_HETFLOW_COMPLETE`` set and the words typed so far in the
environment (bash: ``COMP_WORDS``/``COMP_CWORD``; zsh, fish: ``_TYPER_COMPLETE_ARGS``); typer
answers from the command tree (typer/completion.py ``shell_complete``, on click's
``shell_completion``).  hetflow loads a command's module only when that command is named
(main.COMMANDS), so ``completion_words`` gives main the words to load from; a word that names
no command yet (``hetflow ru<TAB>``) loads them all, to offer every name.

typer's instruction is ``complete_bash``; click 8 spells it ``bash_complete`` (click's
"Shell Completion" docs), so a script written for click works too.
"""

from __future__ import annotations

import shlex
from collections.abc import MutableMapping

import typer

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_HETFLOW_COMPLETE"  # click's and typer's name for prog "hetflow": _{PROG}_COMPLETE


def register(app: typer.Typer) -> None:
    app.command()(completion)


def completion(shell: str = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish.")) -> None:
    """Print a shell completion script: `source <(hetflow completion bash)` in ~/.bashrc."""
    # typer.completion imports both names from its private modules (typer 0.12 to 0.29) for its
    # own --show-completion; mypy sees no explicit re-export
    from typer.completion import get_completion_script  # type: ignore[attr-defined]

    from hetflow.errors import UsageError

    if shell not in SHELLS:
        raise UsageError(f"no completion for shell {shell!r}: hetflow completes in {', '.join(SHELLS)}")
    print(get_completion_script(prog_name="hetflow", complete_var=COMPLETE_VAR, shell=shell))


def completion_words(environ: MutableMapping[str, str]) -> list[str] | None:
    """The words a completion request has typed after ``hetflow`` (None: not a request).

    Turns click's ``bash_complete`` into typer's ``complete_bash`` in ``environ`` and
    registers typer's shell classes, which typer does only for an app with its own
    --install-completion option (hetflow has the command instead)."""
    instruction = environ.get(COMPLETE_VAR)
    if not instruction:
        return None
    first, _, second = instruction.partition("_")
    if first in SHELLS and second in ("complete", "source"):
        environ[COMPLETE_VAR] = f"{second}_{first}"
    from typer.completion import completion_init  # type: ignore[attr-defined]

    completion_init()
    typed = environ.get("COMP_WORDS") or environ.get("_TYPER_COMPLETE_ARGS") or ""
    try:
        words = shlex.split(typed)
    except ValueError:  # an open quote, mid-word
        words = typed.split()
    return words[1:]
