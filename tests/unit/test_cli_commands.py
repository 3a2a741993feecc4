"""`hetflow CMD` loads only the module CMD is in: main's table of which module registers
which commands must say exactly what the modules register, or a command would vanish."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.parametrize("argv", [["ps", "--all", "--json"], ["ps"], ["show", "nope"]], ids=["ps-json", "ps", "show"])
def test_the_store_reading_commands_load_no_execute_stage(argv: list[str], tmp_path: Path) -> None:
    """`hetflow ps` and `show` read the store only and should answer at once (`logs` reads
    the run's recorded workflow too, for its secrets' names): a
    module-level import of the dry run's table once made `ps` load the execute stage, the
    image resolver and httpx (0.22 s -> 0.45 s a call), which every poll of a script pays.
    Nor pydantic: typer's coercion of a flag left out, and the spec models for a fan-out
    item's name, once loaded it (``hetflow.cli.flags``, ``hetflow.spec.fields.naming``)."""
    code = (
        "import sys\n"
        "from hetflow.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('hetflow.execute.submit.pin', 'hetflow.plan', 'httpx',"
        " 'pydantic', 'hetflow.spec.models')))\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "HETFLOW_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_the_coercion_patch_changes_no_value() -> None:
    """``hetflow.cli.flags``: strings and flags pass through, every other type is still
    coerced by typer, a value left out is None, a bad value is still refused."""
    from typer.testing import CliRunner

    from hetflow.cli.flags import install

    install()
    got: dict[str, object] = {}
    app = typer.Typer()

    @app.command()
    def cmd(
        name: str,
        count: int = typer.Option(1, "--count"),
        where: Path | None = typer.Option(None, "--where"),
        tags: list[str] = typer.Option([], "--tag"),
        flag: bool = typer.Option(False, "--flag"),
    ) -> None:
        got.update(name=name, count=count, where=where, tags=tags, flag=flag)

    runner = CliRunner()
    assert runner.invoke(app, ["x", "--count", "3", "--where", "a/b", "--tag", "t", "--flag"]).exit_code == 0
    assert got == {"name": "x", "count": 3, "where": Path("a/b"), "tags": ["t"], "flag": True}
    assert runner.invoke(app, ["y"]).exit_code == 0
    assert got == {"name": "y", "count": 1, "where": None, "tags": [], "flag": False}
    refused = runner.invoke(app, ["z", "--count", "many"])
    assert refused.exit_code == 2 and "Invalid value" in refused.output
