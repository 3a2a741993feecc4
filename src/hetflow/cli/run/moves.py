"""`hetflow migrate` and `hetflow drain`: move running steps with their CRIU checkpoints."""

from __future__ import annotations

import typer

from hetflow.cli.common import console, err, open_store, print_json
from hetflow.cli.shell import complete_runs


def register(app: typer.Typer) -> None:
    app.command()(migrate)
    app.command()(drain)


def migrate(
    run_id: str = typer.Argument(..., help="Run id.", autocompletion=complete_runs),
    step: str = typer.Argument(..., help="A running step with checkpoint: in the workflow."),
    to: str | None = typer.Option(None, "--to", metavar="NODE", help="The node to move it to (a cluster run)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Move a running step: checkpoint it (CRIU), stop it, and restore it as its next attempt,
    on NODE (--to), on another node of the cluster, or on this machine again (the local backend)."""
    from hetflow.execute import migrate_step

    store = open_store()
    rid = store.resolve_run_id(run_id)
    said = migrate_step(store, rid, step, to)
    if json_out:
        print_json({"run": rid, "step": step, "to": to, "message": said})
    else:
        console.print(f"run {rid} step {step}: {said}", highlight=False)


def drain(
    node: str = typer.Argument(..., help="A node of a cluster run (hetflow show's NODE column)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Move every running step with a CRIU checkpoint off NODE (as `hetflow migrate` does);
    steps without one are left to finish there (exit 1 when steps are there and none moved)."""
    from hetflow.execute import drain_node

    found = drain_node(open_store(), node)
    if json_out:
        print_json([{"run": r, "step": s, "message": m, "moved": moved} for r, s, m, moved in found])
    else:
        if not found:
            console.print(f"no running step of any run is on {node}", highlight=False)
        for r, s, m, _moved in found:
            console.print(f"run {r} step {s}: {m}", highlight=False)
    if found and not any(moved for *_, moved in found):
        # steps are still there: a script that drains before maintenance must not go on
        err.print(f"nothing moved off {node}: {len(found)} running step(s) are still on it", highlight=False)
        raise typer.Exit(1)
