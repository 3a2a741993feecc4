"""Hostile and broken input (issue 12, "Input"): each class gets one clear ``file:line``
error that says what to change, fast, with exit status 2 and never a traceback."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from hetflow.cli.main import main
from hetflow.errors import SpecError
from hetflow.spec import load_workflow
from hetflow.spec.source.yamlfile import MAX_BYTES, compose_yaml

GOOD = """apiVersion: hetflow/v1
name: ok
steps:
  a:
    image: busybox
    command: [true]
"""


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion-laughs document: each level lists the one before ``width`` times."""
    text = 'a0: &a0 ["lol"]\n'
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return text


CASES = [
    ("alias-bomb", alias_bomb(), 8, "expands to more than 2,000,000 values through its aliases"),
    ("deep-flow", "x: " + "[" * 5000 + "]" * 5000 + "\n", 1, "exceeded maximum nesting depth"),
    ("deep-block", "".join("  " * i + f"k{i}:\n" for i in range(5000)), 101, "nests more than 100 levels deep"),
    ("image-empty", GOOD.replace("image: busybox", "image: ''"), 5, "steps.a.image: image reference '': it is empty"),
    (
        "image-flag",
        GOOD.replace("image: busybox", "image: --privileged"),
        5,
        "it starts with '-', so podman would read it as an option",
    ),
    ("nul-in-command", GOOD.replace("[true]", '["a\\0b"]'), 6, "a value holds a NUL byte"),
    ("nul-raw", GOOD + "\x00", 7, "the file holds a NUL byte"),
    (
        "env-key-equals",
        GOOD + "    env: {'NVIDIA_VISIBLE_DEVICES=all': ''}\n",
        7,
        "env key 'NVIDIA_VISIBLE_DEVICES=all' is not a variable name",
    ),
    (
        "env-key-preload",
        GOOD + "    env: {'LD_PRELOAD=/tmp/x.so': ''}\n",
        7,
        "env key 'LD_PRELOAD=/tmp/x.so' is not a variable name",
    ),
    ("env-key-empty", GOOD + "    env: {'': x}\n", 7, "env key '' is not a variable name"),
    (
        "unclosed-template",
        "apiVersion: hetflow/v1\nname: ok\nparams: {x: 1}\nsteps:\n  a:\n    image: busybox\n"
        "    command: ['{{ params.x']\n",
        7,
        "opens '{{' without a matching '}}'",
    ),
    ("cpus-tiny", GOOD + "    resources: {cpus: 0.001}\n", 7, "cpus must be between 0.01"),
    ("cpus-inf", GOOD + "    resources: {cpus: .inf}\n", 7, "cpus must be between 0.01"),
    ("memory-zero", GOOD + "    resources: {memory: 0}\n", 7, "memory must be between 6Mi"),
    ("gpus-absurd", GOOD + "    resources: {gpus: 100000}\n", 7, "less than or equal to 1024"),
    ("estimate-absurd", GOOD + "    estimate: 100000h\n", 7, "an estimate must be from 0s to a year"),
    ("retries-absurd", GOOD + "    retries: 1000000\n", 7, "less than or equal to 100"),
    ("bad-date", GOOD + "    description: !!timestamp 2024-13-45\n", 7, "is not a valid timestamp; fix or quote it"),
]


@pytest.mark.parametrize(("text", "line", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_input_class_gets_one_clear_error(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    started = time.thread_time()
    with pytest.raises(SpecError) as caught:
        load_workflow(path)
    assert time.thread_time() - started < 1.0  # CPU seconds of this thread: the same on a loaded machine
    assert any(p.file == str(path) and p.line == line and message in p.message for p in caught.value.problems), [
        str(p) for p in caught.value.problems
    ]


def test_alias_bomb_is_refused_fast_and_small() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.thread_time()
    _, _, problems = compose_yaml(alias_bomb(12, 20), "bomb.yaml")
    assert time.thread_time() - started < 0.5  # CPU seconds, not wall-clock ones: a busy machine does not count
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: under 50 MiB more
    assert problems and "alias bomb" in problems[0].message


def test_too_many_aliases() -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 10_001) + "]\n"
    _, _, problems = compose_yaml(text, "w.yaml")
    assert problems and "more than 10,000 aliases" in problems[0].message


def test_oversized_and_non_utf8_files_name_the_file(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(MAX_BYTES + 1)  # sparse: checked by size before it is read
    with pytest.raises(SpecError, match="over the 64 MiB limit"):
        load_workflow(big)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(GOOD.encode() + b"    description: caf\xe9\n")
    with pytest.raises(SpecError) as caught:
        load_workflow(latin)
    assert str(caught.value.problems[0]) == f"{latin}:7: error: byte 0xe9 is not UTF-8; save the file as UTF-8"


# --- the command line -----------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out = capsys.readouterr()
    code = exited.value.code
    text = " ".join((out.out + out.err).split())  # rich wraps long lines
    return (code if isinstance(code, int) else 0 if code is None else 1), text


COMMANDS = [
    pytest.param(["validate", "{wf}"], id="validate"),
    pytest.param(["validate", "--json", "{wf}"], id="validate-json"),
    pytest.param(["run", "{wf}"], id="run"),
    pytest.param(["plan", "{wf}", "--cluster", "examples/clusters/hetero-16.yaml"], id="plan"),
    pytest.param(["simulate", "{wf}", "--cluster", "examples/clusters/hetero-16.yaml"], id="simulate"),
    pytest.param(["plan", "examples/meanpool/workflow.yaml", "--cluster", "{wf}"], id="plan-bad-cluster"),
    pytest.param(["cluster", "plan", "{wf}", "--catalog", "examples/clusters/catalog.yaml"], id="cluster-plan"),
    pytest.param(["cluster", "plan", "examples/meanpool/workflow.yaml", "--catalog", "{wf}"], id="bad-catalog"),
    pytest.param(["export", "kubernetes", "{wf}", "--cluster", "examples/clusters/hetero-16.yaml"], id="export"),
    pytest.param(["import", "wfcommons", "{wf}"], id="import"),
    pytest.param(["validate", "{wf}", "-p", "x"], id="bad-param"),
]


@pytest.mark.parametrize("argv", COMMANDS)
def test_bad_input_exits_2_everywhere_without_a_traceback(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HETFLOW_FAKE_GPUS", "")
    wf = tmp_path / "bad.yaml"
    wf.write_text(alias_bomb())
    code, output = run_cli([a.replace("{wf}", str(wf)) for a in argv], capsys)
    assert code == 2, output
    assert "Traceback" not in output and "internal error" not in output


@pytest.mark.parametrize(
    ("home", "message"),
    [
        ("afile", "is a file, not a directory"),
        ("afile/sub", "which is a file, not a directory"),
    ],
    ids=["file", "under-a-file"],
)
def test_hetflow_home_that_is_a_file(
    home: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path / home))
    code, output = run_cli(["ps"], capsys)
    assert code == 2 and message in output and "point HETFLOW_HOME at a directory" in output


def test_numeric_environment_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("HETFLOW_POLL_INTERVAL", "soon")
    code, output = run_cli(["ps"], capsys)
    assert code == 2 and "HETFLOW_POLL_INTERVAL='soon': give a number of seconds" in output


def test_a_nul_in_a_param_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path))
    code, output = run_cli(["validate", "examples/meanpool/workflow.yaml", "-p", "size=1\x002"], capsys)
    assert code == 2 and "NUL byte" in output


def test_an_unexpected_exception_is_one_line_exit_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HETFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("HETFLOW_DEBUG", raising=False)

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("hetflow.cli.main.check_environment", boom)
    code, output = run_cli(["ps"], capsys)
    assert code == 70
    assert "internal error: RuntimeError: boom" in output and "HETFLOW_DEBUG=1" in output
    assert "Traceback" not in output
