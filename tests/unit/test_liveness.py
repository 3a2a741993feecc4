"""Is a running run's executor still there: its pid, and the start time recorded with it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetflow.state import RunRecord, executor_gone, process_start


def _run(state: str = "running", pid: int | None = 77, pid_start: int | None = 500) -> RunRecord:
    return RunRecord("r", "wf", "wf.yaml", state, 0.0, 0.0, None, pid, 0, 0, "/w", "{}", "{}", "", pid_start=pid_start)


GONE = [
    pytest.param(_run(), True, 500, False, id="alive-same-start"),
    pytest.param(_run(), False, 500, True, id="pid-dead"),
    pytest.param(_run(), True, 900, True, id="pid-reused-other-start"),
    pytest.param(_run(), True, None, False, id="start-unreadable-trust-pid"),
    pytest.param(_run(pid_start=None), True, 900, False, id="claimed-by-older-hetflow"),
    pytest.param(_run(pid=None), True, 500, True, id="no-pid"),
    pytest.param(_run(state="failed", pid=None), False, None, False, id="ended-run"),
    pytest.param(_run(state="pending", pid=None), False, None, False, id="not-claimed-yet"),
]


@pytest.mark.parametrize(("run", "alive", "start", "gone"), GONE)
def test_executor_gone(run: RunRecord, alive: bool, start: int | None, gone: bool) -> None:
    assert executor_gone(run, alive=lambda pid: alive, start_of=lambda pid: start) is gone


def test_process_start_reads_field_22_past_a_name_with_spaces_and_parens(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    rest = " ".join(str(n) for n in range(4, 22))  # fields 4..21
    (tmp_path / "42" / "stat").write_text(f"42 (a b) c)) S {rest} 123456 0 0\n")
    assert process_start(42, tmp_path) == 123456
    assert process_start(43, tmp_path) is None
    assert process_start(os.getpid()) is not None
