"""The harness's fork server (``tests.integration.forkserver``) answers each command as
``python -m hetflow.cli.main`` in a real subprocess does: the same output, error and exit
status, with the caller's environment, working folder and time limit; and what its imports
read of the environment is what it keys its servers on."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import forkcall
from tests.integration.forkcall import OFF_ENV, Servers
from tests.integration.forkserver import DEEP, IMPORT_KEYS, MODULE

ROOT = Path(__file__).resolve().parents[2]
BAD = "apiVersion: hetflow/v1\nname: bad\nsteps:\n  a: {image: x, command: [true], resources: {cpus: -1}}\n"


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    started = Servers()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HETFLOW_")}
    return {**clean, "HETFLOW_HOME": str(tmp_path / "home"), "COLUMNS": "200"}


def real(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", MODULE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)


def forked(servers: Servers, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = servers.run(args, env, 120)
    assert proc is not None, "the fork server did not take the command"
    return proc


def test_the_preload_reads_no_variable_the_servers_are_not_keyed_on_and_leaves_no_state() -> None:
    audit = subprocess.run(
        [sys.executable, "-m", "tests.integration.forkserver", "--audit"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    lines = audit.stdout.split()
    read = {line for line in lines if ":" not in line}
    assert "HOME" in read  # the audit sees what imports read (sysconfig's user base)
    assert read - IMPORT_KEYS <= {k for k in read if k.startswith("PYTHON")}
    assert [line for line in lines if ":" in line] == []  # no thread started, no cache of hetflow's filled


def test_every_module_the_server_preloads_is_there() -> None:
    code = f"import importlib\nfor name in {list(DEEP)!r}:\n    importlib.import_module(name)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, f"a module of forkserver.DEEP is gone (renamed?): update DEEP\n{proc.stderr}"


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["ps", "--all", "--json"],
        ["show", "nosuchrun"],
        ["nosuchcommand"],
        ["run", "--help"],
        ["validate", "bad.yaml"],
        ["validate", "missing.yaml"],
        [],
    ],
    ids=lambda a: " ".join(a) or "no-args",
)
def test_a_forked_command_answers_as_a_real_one(
    servers: Servers, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    (tmp_path / "bad.yaml").write_text(BAD)
    monkeypatch.chdir(tmp_path)  # relative paths are the caller's
    got, want = forked(servers, args, env), real(args, env, tmp_path)
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_each_command_gets_the_callers_environment(servers: Servers, env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    bad = forked(servers, ["ps", "--all"], {**env, "HETFLOW_HOME": str(tmp_path / "afile")})
    assert bad.returncode == 2
    assert f"HETFLOW_HOME {tmp_path / 'afile'} is a file" in bad.stderr
    assert forked(servers, ["ps", "--all"], env).returncode == 0  # the server kept none of the last one's
    assert forked(servers, ["ps", "--all"], {**env, "HETFLOW_POLL_INTERVAL": "x"}).returncode == 2


def test_a_command_past_its_time_limit_is_killed(servers: Servers, env: dict[str, str]) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        servers.run(["--help"], env, 0.0)
    assert forked(servers, ["--version"], env).returncode == 0  # the server goes on


def test_python_variables_get_their_own_server_and_the_switch_turns_it_off(
    servers: Servers, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    forked(servers, ["--version"], env)
    warned = {**env, "PYTHONWARNINGS": "error::DeprecationWarning"}
    assert forked(servers, ["--version"], warned).stdout == real(["--version"], warned).stdout
    assert len(servers.started) == 2  # the plain one, and the one started with PYTHONWARNINGS
    monkeypatch.setenv(OFF_ENV, "0")
    assert servers.run(["--version"], env, 60) is None


def test_past_keep_servers_the_least_recently_used_ends(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkcall, "KEEP", 1)
    own = Servers()
    try:
        assert forked(own, ["--version"], env).returncode == 0
        first = own.started
        other = {**env, "XDG_CACHE_HOME": env["HETFLOW_HOME"]}
        assert forked(own, ["--version"], other).returncode == 0
        assert own.started != first
        assert len(own.started) == 1
        assert forked(own, ["--version"], env).returncode == 0  # started again
    finally:
        own.close()
