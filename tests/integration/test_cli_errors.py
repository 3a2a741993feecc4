"""Bad input of any kind: a clear message naming the file, field or value, a non-zero
exit, no traceback, nothing already done lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, write

GOOD = f"""apiVersion: hetflow/v1
name: ok
steps:
  a:
    image: {BUSYBOX}
    command: [true]
"""

CASES = [
    ("typo-key", GOOD.replace("command:", "comand:"), 6, "unknown key 'comand' in steps.a (did you mean 'command'?)"),
    (
        "cycle",
        GOOD
        + f"""  b:
    needs: [c]
    image: {BUSYBOX}
  c:
    needs: [b]
    image: {BUSYBOX}
""",
        7,
        "the steps form a cycle: b -> c -> b",
    ),
    (
        "gpu-impossible",
        GOOD.replace("command: [true]", "command: [true]\n    resources: {gpus: 2}"),
        7,
        "step 'a' asks for 2 GPUs; this machine has none",
    ),
    (
        "too-many-cpus",
        GOOD.replace("command: [true]", "command: [true]\n    resources: {cpus: 512}"),
        7,
        "step 'a' asks for 512 CPUs; this machine has",
    ),
    (
        "dotdot",
        GOOD.replace("command: [true]", "command: [true]\n    outputs: [../escape]"),
        7,
        "output '../escape' of step 'a' must not contain '..'",
    ),
    ("bad-yaml", "apiVersion: hetflow/v1\nsteps: [\n", 3, "not valid YAML"),
]


@pytest.mark.parametrize(("text", "line", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate_and_run_refuse_bad_workflows(hf: Hetflow, tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    for cmd in (["validate", path], ["run", path]):
        proc = hf(*cmd, check=False)
        assert proc.returncode != 0
        assert f"{path}:{line}: error: {message}" in proc.stderr.replace("\n", " ")
        assert "Traceback" not in proc.stderr
    assert not (hf.home / "runs").exists() or not any((hf.home / "runs").iterdir())


def test_missing_image_is_refused_before_anything_starts(hf: Hetflow, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace(BUSYBOX, "localhost/nope/missing:1"))
    proc = hf("run", path, check=False)
    assert proc.returncode == 2
    assert "image 'localhost/nope/missing:1' is not in podman's image store" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "deadbeef"], "no run 'deadbeef'"),
        (["logs", "deadbeef"], "no run 'deadbeef'"),
        (["stop", "deadbeef"], "no run 'deadbeef'"),
        (["resume", "deadbeef"], "no run 'deadbeef'"),
        (["run", "/nonexistent/wf.yaml"], "/nonexistent/wf.yaml:1: error: no such file"),
    ],
    ids=["show", "logs", "stop", "resume", "no-file"],
)
def test_unknown_things_are_named(hf: Hetflow, args: list[str], message: str) -> None:
    proc = hf(*args, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_param_and_bad_fake_gpu_setting(hf: Hetflow, tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    proc = hf("run", path, "-p", "novalue", check=False)
    assert proc.returncode == 2 and "-p 'novalue': write -p NAME=VALUE" in proc.stderr
    proc = hf("run", path, "-p", "size=3", check=False)
    assert proc.returncode == 2 and "declares no param 'size'" in proc.stderr
    proc = hf("nodes", extra_env={"HETFLOW_FAKE_GPUS": "x100:2"}, check=False)
    assert proc.returncode == 2 and "'x100:2'" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_step_for_logs_lists_the_steps(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", write(tmp_path, GOOD), "-q")
    proc = hf("logs", hf.last_run(), "zzz", check=False)
    assert proc.returncode == 2 and "has no step 'zzz'; its steps: a" in proc.stderr


def test_an_engine_hetflow_does_not_drive_is_refused_before_anything_is_recorded(hf: Hetflow, tmp_path: Path) -> None:
    proc = hf("run", write(tmp_path, GOOD), extra_env={"HETFLOW_ENGINE": "apptainer"}, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "HETFLOW_ENGINE=apptainer: hetflow drives podman and docker only; apptainer is not supported" in proc.stderr
    assert hf("ps", "--all").stdout.startswith("no runs")
