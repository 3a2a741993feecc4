"""A run's outputs and the cache's objects never share an inode (issue 22): editing one run's
output in place (``>>``, an editor writing in place) changes neither the object nor another
run's output, and a cache hit still verifies.  Real files and a real state store."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from hetflow.execute.data import cache as cache_module
from hetflow.execute.data.cache import ResultCache, clone_or_copy
from hetflow.execute.data.cachekey import Key
from hetflow.state import CacheEntry, OutputRecord, Store


def test_clone_or_copy_makes_a_file_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"bytes\n")
    clone_or_copy(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == b"bytes\n"
    assert (tmp_path / "a").stat().st_ino != (tmp_path / "b").stat().st_ino
    with (tmp_path / "b").open("ab") as f:
        f.write(b"more\n")
    assert (tmp_path / "a").read_bytes() == b"bytes\n"


def test_restored_outputs_are_each_runs_own(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "state.db")
    cache = ResultCache(store, tmp_path / "home" / "cache")
    out = tmp_path / "run-1" / "out"
    out.mkdir(parents=True)
    (out / "r.txt").write_text("one\n")
    sha = hashlib.sha256(b"one\n").hexdigest()
    key = Key("k" * 64, "{}")
    cache.save(
        key,
        workflow="wf",
        step="s",
        run_id="run-1",
        records=[OutputRecord("run-1", "s", "r.txt", sha, 4, str(out / "r.txt"))],
    )
    obj = cache.object_path(sha)
    assert stat.S_IMODE(obj.stat().st_mode) == 0o444
    entry = cache.lookup(key)
    assert entry is not None
    finals = [tmp_path / f"run-{i}" / "steps" / "s" / "out" for i in (2, 3)]
    for i, final in enumerate(finals, start=2):
        assert cache.restore(entry, f"run-{i}", "s", final) is not None
    inodes = {p.stat().st_ino for p in [obj, out / "r.txt", *(f / "r.txt" for f in finals)]}
    assert len(inodes) == 4  # four files, no two linked
    with (finals[0] / "r.txt").open("a") as f:
        f.write("edited in place\n")
    assert [(f / "r.txt").read_text() for f in finals[1:]] == ["one\n"]
    assert obj.read_text() == "one\n" and (out / "r.txt").read_text() == "one\n"
    assert cache.restore(entry, "run-4", "s", tmp_path / "run-4" / "out") is not None  # the object still verifies


def test_an_object_an_older_hetflow_hard_linked_into_a_run_becomes_its_own_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "state.db")
    cache = ResultCache(store, tmp_path / "home" / "cache")
    out = tmp_path / "run-1" / "out"
    out.mkdir(parents=True)
    (out / "r.txt").write_text("one\n")
    sha = hashlib.sha256(b"one\n").hexdigest()
    obj = cache.object_path(sha)
    obj.parent.mkdir(parents=True)
    os.link(out / "r.txt", obj)  # what hetflow before issue 22 left
    record = OutputRecord("run-1", "s", "r.txt", sha, 4, str(out / "r.txt"))
    cache.save(Key("k" * 64, "{}"), workflow="wf", step="s", run_id="run-1", records=[record])
    assert obj.stat().st_nlink == 1 and obj.stat().st_ino != (out / "r.txt").stat().st_ino


def _saved(tmp_path: Path, cache: ResultCache, name: str) -> tuple[Path, CacheEntry]:
    """An entry of one small output, "one\n", saved under a key of its own; its object."""
    out = tmp_path / "run-1" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "r.txt").write_text("one\n")
    sha = hashlib.sha256(b"one\n").hexdigest()
    key = Key(hashlib.sha256(name.encode()).hexdigest(), "{}")
    record = OutputRecord("run-1", "s", "r.txt", sha, 4, str(out / "r.txt"))
    cache.save(key, workflow="wf", step="s", run_id="run-1", records=[record])
    entry = cache.lookup(key)
    assert entry is not None
    return cache.object_path(sha), entry


@pytest.mark.parametrize("damage", ["removed", "replaced by other bytes", "replaced by the same bytes"])
def test_an_object_changed_after_a_restore_is_caught_by_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """The cache keeps a small object's verified bytes for the next restore of it (a
    fan-out's items share a few objects), only while the file is the one it verified: once
    it is removed or replaced, the next restore verifies it again and refuses a bad one."""
    monkeypatch.setattr(cache_module, "_now_ns", lambda: 1 << 62)  # every object old enough to keep
    cache = ResultCache(Store(tmp_path / "home" / "state.db"), tmp_path / "home" / "cache")
    obj, entry = _saved(tmp_path, cache, damage)
    for run in ("run-2", "run-3"):  # the second restore from the bytes kept
        assert cache.restore(entry, run, "s", tmp_path / run / "out") is not None
    os.chmod(obj, 0o644)
    if damage == "removed":
        obj.unlink()
    else:
        (tmp_path / "new").write_text("two\n" if damage == "replaced by other bytes" else "one\n")
        os.replace(tmp_path / "new", obj)
    again = cache.restore(entry, "run-4", "s", tmp_path / "run-4" / "out")
    if damage == "replaced by the same bytes":
        assert again is not None and (tmp_path / "run-4" / "out" / "r.txt").read_text() == "one\n"
    else:
        assert again is None and cache.lookup(Key(entry.key, "{}")) is None  # refused, the entry dropped
    assert (tmp_path / "run-3" / "out" / "r.txt").read_text() == "one\n"


def test_an_object_changed_in_place_right_after_its_check_is_checked_again(tmp_path: Path) -> None:
    """Written in place with the same size within a timestamp tick, a file keeps its inode,
    size, mtime and ctime: an object changed that recently is never taken on its stat alone."""
    cache = ResultCache(Store(tmp_path / "home" / "state.db"), tmp_path / "home" / "cache")
    obj, entry = _saved(tmp_path, cache, "in place")
    assert cache.restore(entry, "run-2", "s", tmp_path / "run-2" / "out") is not None
    os.chmod(obj, 0o644)
    obj.write_text("two\n")  # same size, same inode, likely the same tick
    assert cache.restore(entry, "run-3", "s", tmp_path / "run-3" / "out") is None


@pytest.mark.parametrize("name", ["o.txt", "sub/o.txt", "./o.txt", "sub//o.txt"])
def test_a_restore_into_a_folder_given_as_text_records_the_paths_pathlib_would(tmp_path: Path, name: str) -> None:
    """The cache pass gives the step's folder as a string (no pathlib objects for 10,000
    steps): the records' paths are what ``Path(folder) / name`` spells, whatever the name."""
    store = Store(tmp_path / "home" / "state.db")
    cache = ResultCache(store, tmp_path / "home" / "cache")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "o.txt").write_text("one\n")
    sha = hashlib.sha256(b"one\n").hexdigest()
    record = OutputRecord("run-1", "s", name, sha, 4, str(tmp_path / "src" / "o.txt"))
    cache.save(Key("n" * 64, "{}"), workflow="wf", step="s", run_id="run-1", records=[record])
    entry = cache.lookup(Key("n" * 64, "{}"))
    assert entry is not None
    as_path = cache.restore(entry, "run-2", "s", tmp_path / "run-2" / "out")
    as_text = cache.restore(entry, "run-3", "s", str(tmp_path / "run-3" / "out"))
    assert as_path is not None and as_text is not None
    assert [r.path for r in as_path] == [str(tmp_path / "run-2" / "out" / name)]
    assert [r.path for r in as_text] == [str(tmp_path / "run-3" / "out" / name)]
    assert Path(as_text[0].path).read_text() == "one\n"
