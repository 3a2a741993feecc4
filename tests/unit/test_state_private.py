"""state.db and the files SQLite keeps beside it are 0600 (they hold env: values and params);
a run's folder is 0700."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hetflow.execute import RunPaths
from hetflow.execute.data.paths import make_run_dir
from hetflow.state import Store
from hetflow.state.guards.private import make_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)  # the usual one: what made state.db 0644
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_store_and_its_wal_and_shm_are_0600(tmp_path: Path, open_umask: None) -> None:
    store = Store(tmp_path / "state.db")
    try:
        store.create_run(
            run_id="r1",
            name="x",
            workflow_file="w",
            spec_json="{}",
            params_json='{"token": "s3cret"}',
            uid=0,
            gid=0,
            workdir=str(tmp_path),
            steps=["a"],
        )
        beside = [tmp_path / "state.db-wal", tmp_path / "state.db-shm"]
        assert all(p.exists() for p in beside)
        assert {p.name: mode(p) for p in [tmp_path / "state.db", *beside]} == {
            "state.db": 0o600,
            "state.db-wal": 0o600,
            "state.db-shm": 0o600,
        }
    finally:
        store.close()


def test_an_old_world_readable_store_is_narrowed_when_a_writer_opens_it(tmp_path: Path, open_umask: None) -> None:
    Store(tmp_path / "state.db").close()
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        if (tmp_path / name).exists():
            os.chmod(tmp_path / name, 0o644)
    Store(tmp_path / "state.db", read_only=True).close()  # a reader changes nothing
    assert mode(tmp_path / "state.db") == 0o644
    Store(tmp_path / "state.db").close()
    assert mode(tmp_path / "state.db") == 0o600


def test_a_narrower_mode_is_kept_and_a_missing_file_is_no_error(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.write_bytes(b"")
    os.chmod(db, 0o400)
    make_private(db)
    assert mode(db) == 0o400
    make_private(tmp_path / "nothing.db")


def test_a_run_folder_is_0700_even_if_its_data_made_it_first(tmp_path: Path, open_umask: None) -> None:
    workdir = tmp_path / "home" / "runs" / "r1"
    (workdir / "data").mkdir(parents=True)  # data fetched before the run is recorded
    make_run_dir(workdir)
    assert mode(workdir) == 0o700
    fresh = tmp_path / "other" / "runs" / "r2"
    (tmp_path / "other").mkdir()
    make_run_dir(fresh)
    assert (mode(fresh), mode(fresh.parent)) == (0o700, 0o700)
    assert RunPaths(fresh).workflow.parent == fresh
