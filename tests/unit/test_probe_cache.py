"""What everyday commands keep between calls (issue 43): probe answers, the store's check,
the runs' indexes; each kept answer goes when what it depends on changes."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.probecache import OFF_ENV, remembered, stamp
from hetflow.state import Store
from hetflow.state.guards.integrity import StoreDamaged, checked_file


def test_an_answer_is_kept_under_its_key_and_a_new_key_probes_again(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    calls: list[str] = []

    def probe(answer: str) -> str:
        calls.append(answer)
        return answer

    assert remembered("t", "k1", lambda: probe("one"), env) == "one"
    assert remembered("t", "k1", lambda: probe("two"), env) == "one"  # kept
    assert remembered("t", "k2", lambda: probe("three"), env) == "three"  # another key: probed
    assert remembered("t", "k1", lambda: probe("four"), {**env, OFF_ENV: "0"}) == "four"  # cache off
    assert calls == ["one", "three", "four"]


def test_a_stamp_changes_with_the_file(tmp_path: Path) -> None:
    f = tmp_path / "bin"
    before = stamp([f])
    f.write_text("a")
    made = stamp([f])
    f.write_text("ab")
    assert len({before, made, stamp([f])}) == 3


def _fake_criu(path: Path, version: str) -> None:
    """A criu that logs each call beside itself."""
    log = path.with_name("calls")
    path.write_text(f'#!/bin/sh\necho "$1" >> {log}\n[ "$1" = --version ] && echo \'Version: {version}\'\nexit 0\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _version_in_a_new_process(criu: Path, cache: Path) -> str:
    code = "from hetflow.execute import criu_support; print(criu_support().version)"
    env = {**os.environ, "HETFLOW_CRIU": str(criu), "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="CRIU's check is asked for as root only")
def test_criu_check_is_kept_between_commands_until_the_binary_changes(tmp_path: Path) -> None:
    criu, cache = tmp_path / "criu", tmp_path / "cache"
    _fake_criu(criu, "4.1")
    assert _version_in_a_new_process(criu, cache) == "4.1"
    assert _version_in_a_new_process(criu, cache) == "4.1"
    assert (tmp_path / "calls").read_text().split() == ["--version", "check"]  # asked once
    _fake_criu(criu, "4.2-longer")  # a new binary: its size and mtime change
    assert _version_in_a_new_process(criu, cache) == "4.2-longer"
    assert (tmp_path / "calls").read_text().split() == ["--version", "check", "--version", "check"]


def test_a_store_found_whole_is_not_checked_again_until_it_changes(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Store(db).close()  # new: nothing to check
    s = Store(db)  # checked, found whole
    s.create_run(
        run_id="r1", name="n", workflow_file="w", spec_json="{}", params_json="{}", uid=0, gid=0,
        workdir=str(tmp_path), steps=["a"], backend="local", plan_json=None,
    )  # fmt: skip
    s.close()
    kept = checked_file(db).read_text()
    Store(db).close()  # changed since: checked again, a new stamp
    assert checked_file(db).read_text() != kept
    kept = checked_file(db).read_text()
    Store(db).close()  # unchanged: the stamp stays
    assert checked_file(db).read_text() == kept


def test_a_store_damaged_after_a_clean_check_is_still_refused(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    s = Store(db)
    s._db.execute("CREATE TABLE filler (x TEXT)")
    s._db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,) for _ in range(400)])
    s.close()
    Store(db).close()  # found whole: the stamp is written
    assert checked_file(db).is_file()
    data = bytearray(db.read_bytes())
    data[4096 * 20 : 4096 * 20 + 64] = b"\xff" * 64
    db.write_bytes(bytes(data))  # a write: the file's mtime moves
    with pytest.raises(StoreDamaged):
        Store(db)


def test_a_store_made_before_the_runs_indexes_gets_them_on_open(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    Store(db).close()
    raw = sqlite3.connect(db)
    for index in ("runs_created", "runs_state", "runs_name", "attempts_history"):
        raw.execute(f"DROP INDEX {index}")
    raw.commit()
    raw.close()
    Store(db).close()
    raw = sqlite3.connect(db)
    names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    plan = " ".join(r[3] for r in raw.execute("EXPLAIN QUERY PLAN SELECT * FROM runs ORDER BY created DESC LIMIT 5"))
    by_name = " ".join(r[3] for r in raw.execute("EXPLAIN QUERY PLAN SELECT id FROM runs WHERE name = 'w'"))
    newest = " ".join(
        r[3]
        for r in raw.execute(
            "EXPLAIN QUERY PLAN SELECT ended FROM attempts WHERE step = 'a' AND variant = 'v' AND node = 'n'"
            " ORDER BY ended DESC, run_id DESC, attempt DESC LIMIT 5"
        )
    )
    raw.close()
    assert {"runs_created", "runs_state", "runs_name", "attempts_history"} <= names
    assert "attempts_history" in newest and "TEMP B-TREE" not in newest  # a key's newest, read backwards
    assert "runs_created" in plan  # ps reads newest first without sorting the table
    assert "runs_name" in by_name  # a workflow's history is found by its name
