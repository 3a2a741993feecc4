"""Shell completion: ``hetflow completion bash|zsh|fish`` prints the script, as ``kubectl completion bash`` does.

The script calls hetflow back with ``_HETFLOW_COMPLETE`` set and the words typed so far in the
environment (bash: ``COMP_WORDS``/``COMP_CWORD``; zsh, fish: ``_TYPER_COMPLETE_ARGS``); typer
answers from the command tree (typer/completion.py ``shell_complete``, on click's
``shell_completion``).  hetflow loads a command's module only when that command is named
(main.COMMANDS), so ``completion_words`` gives main the words to load from; a word that names
no command yet (``hetflow ru<TAB>``) loads them all, to offer every name.

``complete_runs`` and ``complete_steps`` offer a run's id and its steps (``hetflow logs
<TAB>``), read from the state store when there is one; a completion never fails aloud.

typer's instruction is ``complete_bash``; click 8 spells it ``bash_complete`` (click's
"Shell Completion" docs), so a script written for click works too.
"""

from __future__ import annotations

import shlex
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from hetflow.state import Store

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


def complete_runs(incomplete: str) -> list[tuple[str, str]]:
    """Run ids starting with ``incomplete``, newest first, each with its name and state."""
    try:
        store = _existing_store()
        runs = store.runs(include_ended=True) if store is not None else []
    except Exception:  # the store half-written, locked, of a newer hetflow: offer nothing
        return []
    return [(r.id, f"{r.name} {r.state}") for r in runs if r.id.startswith(incomplete)]


def complete_steps(ctx: typer.Context, incomplete: str) -> list[str]:
    """The steps of the run already typed, and its fan-outs' names (``count`` for count.0..)."""
    from hetflow.spec import fanout_parent

    run_id = ctx.params.get("run_id")
    try:
        store = _existing_store()
        names = [s.step for s in store.steps(store.resolve_run_id(run_id))] if store and run_id else []
    except Exception:  # no such run, an ambiguous prefix: offer nothing
        return []
    groups = {p for n in names if (p := fanout_parent(n)) is not None}
    return [n for n in [*sorted(groups), *names] if n.startswith(incomplete)]


def _existing_store() -> Store | None:
    """The store, if this machine has one: completing must not create it."""
    from hetflow.config import hetflow_home
    from hetflow.state import Store

    path = hetflow_home() / "state.db"
    return Store(path) if path.is_file() else None
