"""The docker fallback, against a stand-in `docker` script (no docker daemon here): the
commands it sends and how it reads docker's answers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hetflow.execute.backends.local.engines import DockerEngine, make_engine
from hetflow.execute.engine import ContainerSpec, cri_lines, run_args
from hetflow.execute.logs import read_lines

FAKE_DOCKER = """#!/bin/sh
echo "$@" >> "$CALLS"
case "$1" in
  ps) printf 'c1\\nc2\\n' ;;
  inspect) printf '/hf-r-a-1 exited 3\\n/hf-r-b-1 running 0\\n' ;;
  logs) echo '2026-01-01T00:00:00.000000000Z hello'; echo '2026-01-01T00:00:01.000000000Z oops' >&2 ;;
esac
"""


@pytest.fixture
def docker(tmp_path: Path) -> tuple[DockerEngine, Path]:
    binary = tmp_path / "docker"
    binary.write_text(FAKE_DOCKER)
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls"
    env = {**os.environ, "CALLS": str(calls), "PATH": f"{tmp_path}:{os.environ['PATH']}", "HETFLOW_ENGINE": "docker"}
    engine = make_engine(env)
    assert isinstance(engine, DockerEngine)
    return engine, calls


def test_states_read_exit_codes_from_inspect(docker: tuple[DockerEngine, Path]) -> None:
    engine, calls = docker
    states = engine.states("r")
    assert states["hf-r-a-1"].exit_code == 3 and not states["hf-r-a-1"].running
    assert states["hf-r-b-1"].running and states["hf-r-b-1"].exit_code is None
    assert calls.read_text().splitlines()[0] == "ps -a -q --filter label=hetflow.run=r"


def test_remove_copies_logs_into_cri_file_first(docker: tuple[DockerEngine, Path], tmp_path: Path) -> None:
    engine, calls = docker
    log = tmp_path / "a.1.log"
    spec = ContainerSpec(
        name="hf-r-a-1", image="img", command=("true",), user="1:1", labels={}, env={}, log_path=str(log)
    )
    engine.start(spec)
    engine.remove(["hf-r-a-1"])
    lines, _ = read_lines(log)
    assert lines == [("stdout", "hello"), ("stderr", "oops")]
    sent = calls.read_text().splitlines()
    assert sent[-1] == "rm -f hf-r-a-1" and sent[-2] == "logs --timestamps hf-r-a-1"
    assert "--log-driver" not in sent[0] and "--hooks-dir" not in sent[0]


def test_podman_args_keep_the_log_in_hetflows_file() -> None:
    spec = ContainerSpec(name="n", image="img", command=(), user="1:1", labels={}, env={}, log_path="/x.log")
    assert "path=/x.log" in run_args(spec, engine="podman")
    assert "--log-driver" not in run_args(spec, engine="docker")


def test_cri_lines() -> None:
    assert cri_lines("T1 a b\nT2 c", "stderr") == "T1 stderr F a b\nT2 stderr F c\n"
