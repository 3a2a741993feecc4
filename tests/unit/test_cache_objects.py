"""A run's outputs and the cache's objects never share an inode (issue 22): editing one run's
output in place (``>>``, an editor writing in place) changes neither the object nor another
run's output, and a cache hit still verifies.  Real files and a real state store."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from hetflow.execute.data.cache import Key, ResultCache, clone_or_copy
from hetflow.state import OutputRecord, Store


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
