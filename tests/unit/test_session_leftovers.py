"""The session-end check (``tests.leftovers``): what a test session started and left running
fails the session, named, and is ended; what runs beside it is never counted."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.leftovers import TOKEN, marked, recorded_runs, session_folder

ROOT = Path(__file__).resolve().parents[2]


def test_a_process_is_the_sessions_when_its_environment_carries_the_sessions_token() -> None:
    ours = subprocess.Popen(["sleep", "600"], env={**os.environ, TOKEN: "t1"}, start_new_session=True)
    other = subprocess.Popen(["sleep", "600"], env={**os.environ, TOKEN: "t2"}, start_new_session=True)
    try:
        found = marked("t1")
        assert ours.pid in found and other.pid not in found and found[ours.pid] == "sleep 600"
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()
    assert ours.pid not in marked("t1")  # reaped: gone


def test_a_process_working_in_a_session_folder_is_the_sessions_without_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As slurmstepd: slurmd starts it with no environment, in its cluster's log folder."""
    monkeypatch.setenv(TOKEN, "abcdef0123456789")
    folder = session_folder("hftest-")
    bare = {k: v for k, v in os.environ.items() if k != TOKEN}
    stepd = subprocess.Popen(["sleep", "600"], cwd=folder, env=bare, start_new_session=True)
    elsewhere = subprocess.Popen(["sleep", "601"], cwd=tmp_path, env=bare, start_new_session=True)
    try:
        shutil.rmtree(folder)  # the fixture removes the cluster's folder: its process works on in it
        found = marked("abcdef0123456789")
        assert stepd.pid in found and elsewhere.pid not in found
        assert elsewhere.pid in marked("abcdef0123456789", tmp_path)  # under the basetemp
    finally:
        for p in (stepd, elsewhere):
            p.kill()
            p.wait()


def test_the_runs_are_those_recorded_under_the_basetemp(tmp_path: Path) -> None:
    home = tmp_path / "t0" / "home"
    home.mkdir(parents=True)
    db = sqlite3.connect(home / "state.db")
    db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY)")  # the column the check reads
    db.execute("INSERT INTO runs VALUES ('abcd1234')")
    db.commit()
    db.close()
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "state.db").write_bytes(b"not a store")  # a test's damaged store: no runs
    assert recorded_runs(tmp_path) == {"abcd1234": "t0/home"}  # each run with the test folder that holds it


LEAKS = """
import subprocess

def test_leaks_a_daemon():
    subprocess.Popen(["sleep", "{seconds}"], start_new_session=True)  # detached, never ended
"""


def test_a_session_that_leaves_a_process_running_fails_naming_it_and_ends_it(tmp_path: Path) -> None:
    # its own length of sleep: another session's leak (a run killed mid-test) is not this one's
    seconds = f"1234.{secrets.randbelow(10**6):06d}"
    (tmp_path / "test_leak.py").write_text(LEAKS.format(seconds=seconds))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.leftovers", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "-c", os.devnull, str(tmp_path / "test_leak.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HFTEST_SETTLE": "1"},
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "the test session left these running" in out and f"sleep {seconds}" in out, out
    assert "they were ended once named" in out
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == f"sleep {seconds}"]


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
