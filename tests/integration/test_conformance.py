"""make conformance's parts on real podman: the stand-in images run what the suite's tests run
and are never pulled, a second build changes nothing, and a short run of the harness against
cwltool (the anchor) writes the table and summary.json."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench.conformance.images import STANDINS, build_standins

from hetflow.config import engine_env

REPO = Path(__file__).resolve().parents[2]

# What the suite's tests run in each image (grep dockerPull in third_party/cwl-v1.2/tests).
CHECKS = {
    "docker.io/debian:stable-slim": (
        ["sh", "-c", "echo cba | rev; printf 'b\\na\\n' | sort | head -n1; awk 'BEGIN{print 7}'; "
         "echo x | grep -c x; echo y | sed s/y/z/; tar --version >/dev/null && bash -c 'echo bash'"],
        "abc\na\n7\n1\nz\nbash\n",
    ),
    "docker.io/python:3-slim": (["python", "-c", "import sys; print(sys.version_info[0])"], "3\n"),
    "docker.io/bash:4.4": (["-c", "echo moo"], "moo\n"),  # docker-run-cmd.cwl: an option first runs bash
    "docker.io/alpine:latest": (
        ["sh", "-c", "mkdir a && echo x > a/f && ln -s a/f l && cat l && touch e && ls e"],
        "x\ne\n",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def standins() -> list[str]:
    return build_standins(log=lambda _: None)


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=engine_env(), capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", sorted(CHECKS), ids=lambda n: n.split("/")[1].split(":")[0])
def test_each_stand_in_runs_what_the_tests_run_without_pulling(standins: list[str], name: str) -> None:
    cmd, expected = CHECKS[name]
    done = _podman("run", "--rm", "--pull=never", "--network=none", "--workdir=/tmp", name, *cmd)
    assert (done.returncode, done.stdout) == (0, expected), done.stderr


def test_a_second_build_changes_nothing(standins: list[str]) -> None:
    def ids() -> list[str]:
        return [_podman("image", "inspect", "--format", "{{.Id}}", image.name).stdout for image in STANDINS]

    before = ids()
    assert build_standins(log=lambda _: None) == standins
    assert ids() == before


def test_a_short_run_against_cwltool_gives_the_table_and_the_json(standins: list[str], tmp_path: Path) -> None:
    # cwltest and cwltool come with the test extra (make install): missing, this fails, never skips
    assert importlib.util.find_spec("cwltest") is not None, "cwltest is not installed (pip install -e '.[test]')"
    found = shutil.which("cwltool", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert found is not None, "cwltool is not installed (pip install -e '.[test]')"
    picked = "docker_entrypoint,legal_symlink,cl_optional_bindings_provided"  # bash, alpine, python stand-ins
    cmd = [sys.executable, "-m", "bench.conformance", "--no-images", "--runners", "cwltool", "-s", picked]
    done = subprocess.run([*cmd, "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "required: cwltool 1/1 passed" in done.stdout
    runs = json.loads((tmp_path / "summary.json").read_text())["runners"]
    assert runs["cwltool"]["tags"]["all"] == {"total": 3, "passed": 3, "failed": 0, "unsupported": 0}
    assert runs["cwltool"]["tags"]["docker"]["passed"] == 1
    assert (tmp_path / "cwltool.xml").is_file()
