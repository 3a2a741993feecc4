"""`hetflow CMD` loads only the module CMD is in: main's table of which module registers
which commands must say exactly what the modules register, or a command would vanish."""

from __future__ import annotations

import importlib

import pytest
import typer

from hetflow.cli.main import COMMANDS


def registered(module: str) -> set[str]:
    app = typer.Typer()
    importlib.import_module(f"hetflow.cli.{module}").register(app)
    names = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands if c.callback}
    names |= {g.name for g in app.registered_groups if g.name}
    return names


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_the_command_table_matches_what_each_module_registers(module: str) -> None:
    assert registered(module) == set(COMMANDS[module])


def test_no_command_is_in_two_modules() -> None:
    names = [n for names in COMMANDS.values() for n in names]
    assert len(names) == len(set(names))
