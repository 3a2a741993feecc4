"""CLI habits users bring from docker, kubectl and Slurm: --version, shell completion, help
without parser tags, a user name in `ps`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from rich.markup import RE_TAGS
from typer.testing import CliRunner

from hetflow.cli.main import app, register_commands
from hetflow.report import ps_table
from hetflow.state import RunRecord

SRC = Path(__file__).resolve().parents[2] / "src"


def hetflow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line, in a subprocess: completion and --version are read before typer runs."""
    full = os.environ | {"PYTHONPATH": str(SRC)} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "hetflow.cli.main", *args], env=full, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("flag", ["--version", "-V"], ids=["long", "short"])
def test_version_prints_the_package_version_and_exits_0(flag: str) -> None:
    from importlib.metadata import version

    done = hetflow(flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hetflow {version('hetflow')}"


def all_commands() -> Iterator[list[str]]:
    register_commands([])  # every module, as `hetflow --help` loads them
    root = typer.main.get_command(app)

    def walk(command: object, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                yield from walk(sub, [*path, name])

    return walk(root, [])


COMMAND_LINES = [" ".join(c) for c in all_commands()]
TAG = re.compile(r"<(bool|str|int|float|path|list\[[a-z]+\]|[a-z]+ range)>|\{[a-z_]+\}")


@pytest.mark.parametrize("command", COMMAND_LINES, ids=[c or "hetflow" for c in COMMAND_LINES])
def test_help_shows_no_parser_tags(command: str) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert not TAG.findall(result.output), result.output


def _help_texts(command: str) -> list[str]:
    cmd = typer.main.get_command(app)
    for name in command.split():
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]


@pytest.mark.parametrize("command", COMMAND_LINES, ids=[c or "hetflow" for c in COMMAND_LINES])
def test_help_keeps_its_square_brackets(command: str) -> None:
    """rich reads ``[rankN]`` as a style tag and drops it (`logs --help` said "lines prefixed :;"):
    every bracketed text rich would eat is escaped ``\\[rankN]``, and shows as written."""
    result = CliRunner().invoke(app, [*command.split(), "--help"], terminal_width=200)
    shown = " ".join(result.output.replace("│", " ").split())
    for text in _help_texts(command):
        for tag in RE_TAGS.finditer(text):
            assert len(tag.group(2)) % 2 == 1, f"{command} --help: escape {tag.group(0)!r} (rich eats it)"
            assert tag.group(0).lstrip("\\") in shown


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # the value's column: after the longest option name (other options' lengths move it)
        ("run", ["Usage: hetflow run [OPTIONS] FILE", r"-p\s+NAME=VALUE", r"--variant\s+STEP=NAME"]),
        ("logs", ["Usage: hetflow logs [OPTIONS] RUN [STEP]"]),
        ("images build-index", ["Usage: hetflow images build-index [OPTIONS] TARGET TAG=FEATURES..."]),
    ],
    ids=["run", "logs", "build-index"],
)
def test_help_names_values_as_users_write_them(command: str, expected: list[str]) -> None:
    result = CliRunner().invoke(app, [*command.split(), "--help"], terminal_width=200)
    for text in expected:
        assert re.search(text, result.output) if "\\s" in text else text in result.output, result.output


def test_a_flag_shows_no_type() -> None:
    result = CliRunner().invoke(app, ["ps", "--help"], terminal_width=200)
    line = next(line for line in result.output.splitlines() if "--all " in line and "-a " in line)
    assert re.search(r"--all\s+-a\s+Also runs that ended", line), line


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_that_calls_hetflow_back(shell: str) -> None:
    done = hetflow("completion", shell)
    assert done.returncode == 0, done.stderr
    assert "_HETFLOW_COMPLETE=complete_" + shell in done.stdout


def test_completion_refuses_a_shell_it_has_no_script_for() -> None:
    done = hetflow("completion", "tcsh")
    assert done.returncode == 2
    assert "no completion for shell 'tcsh'" in done.stderr and "bash, zsh, fish" in done.stderr
    assert "Traceback" not in done.stderr


def bash_complete(tmp_path: Path, line: str) -> list[str]:
    """What bash offers for ``line`` (ending where TAB is pressed): the printed script, sourced
    in a real bash, whose function calls a `hetflow` on PATH back."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "hetflow"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hetflow.cli.main "$@"\n')
    shim.chmod(0o755)
    script = (
        "source <(hetflow completion bash)\n"
        "complete -p hetflow\n"
        f"COMP_WORDS=({line})\n"
        f"COMP_CWORD={len(shlex.split(line)) - (0 if line.endswith(' ') else 1)}\n"
        "[ -n \"${COMP_WORDS[COMP_CWORD]+x}\" ] || COMP_WORDS+=('')\n"
        "_hetflow_completion hetflow\n"
        'printf "offer:%s\\n" "${COMPREPLY[@]}"\n'
    )
    path = f"{bin_dir}:{os.environ['PATH']}"
    env = os.environ | {"PYTHONPATH": str(SRC), "PATH": path, "HETFLOW_HOME": str(tmp_path)}
    done = subprocess.run(["bash", "--norc", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "complete -o default -F _hetflow_completion hetflow" in done.stdout
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
    return [line.removeprefix("offer:") for line in done.stdout.splitlines() if line.startswith("offer:")]


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("hetflow ru", ["run"]),
        ("hetflow logs --f", ["--follow"]),
        ("hetflow images ", ["inspect", "resolve", "build-index"]),
    ],
    ids=["command", "option", "group"],
)
def test_bash_completes_through_the_lazily_loaded_commands(tmp_path: Path, line: str, offered: list[str]) -> None:
    assert bash_complete(tmp_path, line) == offered


def test_bash_completion_of_a_run_argument_does_not_fail(tmp_path: Path) -> None:
    assert bash_complete(tmp_path, "hetflow logs ") in ([], [""])


@pytest.mark.parametrize(
    ("instruction", "words"),
    [
        ("bash_complete", {"COMP_WORDS": "hetflow ru", "COMP_CWORD": "1"}),
        ("complete_zsh", {"_TYPER_COMPLETE_ARGS": "hetflow ru"}),
    ],
    ids=["click-order-bash", "typer-order-zsh"],
)
def test_the_completion_protocol_answers_in_click_and_typer_order(instruction: str, words: dict[str, str]) -> None:
    done = hetflow(env={"_HETFLOW_COMPLETE": instruction, **words})
    assert done.returncode == 0, done.stderr
    assert "run" in done.stdout and "resume" not in done.stdout


def record(uid: int) -> RunRecord:
    return RunRecord(
        id="r1",
        name="wf",
        workflow_file="wf.yaml",
        state="succeeded",
        created=0.0,
        started=None,
        ended=None,
        pid=None,
        uid=uid,
        gid=uid,
        workdir="/tmp",
        spec_json="{}",
        params_json="{}",
        message="",
    )


@pytest.mark.parametrize(("uid", "user"), [(0, "root"), (2_000_000_001, "2000000001")], ids=["in-passwd", "unknown"])
def test_ps_shows_the_user_name_else_the_uid(uid: int, user: str) -> None:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(ps_table([(record(uid), [])]))
    header, row = console.export_text().splitlines()[:2]
    assert header.split()[-1] == "USER"
    assert row.split()[-1] == user
