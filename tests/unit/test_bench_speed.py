"""bench.speed: every part names a bench that exists, rows travel from a bench to the table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from bench import speed
from bench.speedrow import Row, emit, load

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(speed.PARTS))
def test_every_part_names_a_bench_module_that_exists(name: str) -> None:
    module = speed.PARTS[name][0]
    assert importlib.util.find_spec(module) is not None, f"{name}: no module {module}"


def test_a_row_emitted_with_the_env_set_reaches_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = tmp_path / "rows.jsonl"
    monkeypatch.setenv("HETFLOW_SPEED_ROWS", str(rows))
    emit(Row("validate under 0.3 s", 0.25, "s", "podman ps", 0.03, 0.3, "bench.cli"))
    emit(Row("launch, serial", 1.2, "x", "podman run loop", 7.8, 1.05, "bench.local.overhead"))
    got = load(str(rows))
    assert [r.target for r in got] == ["validate under 0.3 s", "launch, serial"]
    assert [r.met for r in got] == [True, False]
    lines = speed.table(got, markdown=True)
    assert lines[2] == "| validate under 0.3 s | 0.250 s | podman ps: 0.030 s | 0.3 s | yes |"
    assert lines[3].endswith("| 1.05 x | no |")


def test_without_the_env_a_row_is_only_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("HETFLOW_SPEED_ROWS", raising=False)
    monkeypatch.chdir(tmp_path)
    emit(Row("plan under 0.3 s", 0.5, "s", "podman ps", None, 0.3, "bench.cli"))
    assert "plan under 0.3 s: 0.500s (limit 0.3s: not met)" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_part_is_refused_by_name() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.speed", "--only", "cli,warp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown part warp" in proc.stderr
    assert "Traceback" not in proc.stderr
