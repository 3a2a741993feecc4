"""`hetflow doctor`: list (and with --repair remove) what crashed runs left behind."""

from __future__ import annotations

import dataclasses

import typer

from hetflow.cli.common import console, open_store, print_json


def register(app: typer.Typer) -> None:
    app.command()(doctor)


def doctor(
    repair: bool = typer.Option(False, "--repair", help="Remove, release, mark what is listed (default: list only)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Find leftovers of crashed runs on this machine: containers, gang networks, GPU leases,
    publishes cut short (files staged beside a target, a set half replaced), runs that say
    running with no executor.  Lists them; --repair removes them.  A live run's
    work is never touched, nor what `hetflow resume` would adopt or collect."""
    from hetflow.execute import diagnose, make_engine
    from hetflow.execute import repair as do_repair

    store, engine = open_store(), make_engine()
    found = diagnose(store, engine)
    if repair:
        do_repair(store, engine, found)
    if json_out:
        print_json({"repaired": repair, "leftovers": [dataclasses.asdict(f) for f in found]})
        return
    if not found:
        console.print("no leftovers")
        return
    verb = "done" if repair else "would"
    for f in found:
        console.print(f"{f.kind:9} {f.name}  ({f.why}): {verb} {f.action}", highlight=False)
    if not repair:
        console.print(f"{len(found)} leftover(s); 'hetflow doctor --repair' repairs them", highlight=False)
