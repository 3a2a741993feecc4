"""Publishing outputs to a host directory: copy, link, overwrite, never a silent replace;
to S3 through an object-store seam (the real S3 path is tested against moto's server).
The rule of what may be replaced is a named table (``decide``); a real state store records
what was published, so a workflow replaces its own unchanged result and nothing else."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from hetflow.execute.data.publishing.publish import LOCK_NAME, PublishError, Publishing, decide, publish_step
from hetflow.spec import Publish, Step
from hetflow.state import PublishRecord, Store


def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    (out / "r.txt").write_text("result\n")
    (out / "d" / "x").write_text("x\n")
    return out


def step(to: str, mode: str = "copy", names: tuple[str, ...] = ()) -> Step:
    return Step(image="i", outputs=("r.txt", "d"), publish=(Publish(to=to, mode=mode, outputs=names),))  # type: ignore[arg-type]


def test_copy_publishes_files_and_directories_and_the_same_bytes_again_is_fine(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    done = publish_step(step(str(tmp_path / "res")), out, os.getuid(), os.getgid())
    assert (tmp_path / "res" / "r.txt").read_text() == "result\n" and (tmp_path / "res" / "d" / "x").exists()
    assert len(done) == 2
    again = publish_step(step(str(tmp_path / "res")), out, os.getuid(), os.getgid())
    assert all("identical" in line for line in again)


def test_a_different_file_is_never_replaced_unless_told(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "r.txt").write_text("precious\n")
    with pytest.raises(PublishError, match=r"r\.txt already exists and was not published by hetflow.*mode: overwrite"):
        publish_step(step(str(tmp_path / "res"), names=("r.txt",)), out, 0, 0)
    assert (tmp_path / "res" / "r.txt").read_text() == "precious\n"
    publish_step(step(str(tmp_path / "res"), "overwrite", ("r.txt",)), out, os.getuid(), os.getgid())
    assert (tmp_path / "res" / "r.txt").read_text() == "result\n"


def test_link_makes_a_hard_link(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    publish_step(step(str(tmp_path / "res"), "link", ("r.txt",)), out, 0, 0)
    assert (tmp_path / "res" / "r.txt").stat().st_ino == (out / "r.txt").stat().st_ino


class FakeS3:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def exists(self, path: str) -> bool:
        return path in self.objects

    def info(self, path: str) -> dict[str, Any]:
        return {"ETag": '"' + hashlib.md5(self.objects[path], usedforsecurity=False).hexdigest() + '"'}

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        """Honours s3fs's ``mode="create"`` and PutObject's ``IfMatch`` as s3fs answers them."""
        if kwargs.get("mode") == "create" and rpath in self.objects:
            raise FileExistsError("At least one of the pre-conditions you specified did not hold")
        if "IfMatch" in kwargs and (rpath not in self.objects or kwargs["IfMatch"] != self.info(rpath)["ETag"]):
            raise OSError(22, "At least one of the pre-conditions you specified did not hold")
        self.objects[rpath] = Path(lpath).read_bytes()

    def find(self, path: str, detail: bool = False) -> Any:
        return {}

    def copy(self, path1: str, path2: str) -> None:
        self.objects[path2] = self.objects[path1]

    def rm_file(self, path: str) -> None:
        del self.objects[path]

    def get_file(self, rpath: str, lpath: str) -> None:
        Path(lpath).write_bytes(self.objects[rpath])


def test_s3_publish_refuses_other_bytes_under_a_key_unless_told(tmp_path: Path) -> None:
    out = outputs(tmp_path)
    fs = FakeS3()
    publish_step(step("s3://b/p/", names=("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)
    assert fs.objects["b/p/r.txt"] == b"result\n"
    assert "identical" in publish_step(step("s3://b/p/", names=("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)[0]
    fs.objects["b/p/r.txt"] = b"other"
    with pytest.raises(PublishError, match=r"s3://b/p/r\.txt already exists"):
        publish_step(step("s3://b/p/", names=("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)
    publish_step(step("s3://b/p/", "overwrite", ("r.txt",)), out, 0, 0, s3=lambda endpoint: fs)
    assert fs.objects["b/p/r.txt"] == b"result\n"


def rec(workflow: str = "wf", sha: str = "old") -> PublishRecord:
    return PublishRecord("t", sha, 3, "run-1", "s", workflow, 0.0)


# (mode, present, regular, identical, content there, record) -> (action, why)
RULE = [
    ("nothing-there", "copy", False, False, False, "", None, "write", ""),
    ("identical-bytes", "copy", True, True, True, "new", None, "keep", ""),
    ("identical-link-mode", "link", True, True, True, "new", None, "keep", ""),
    ("overwrite-anything", "overwrite", True, True, False, "user", None, "replace", "mode: overwrite"),
    ("overwrite-a-link", "overwrite", True, False, False, "", None, "replace", "mode: overwrite"),
    ("a-folder-or-link", "copy", True, False, False, "", rec(), "refuse", "not a regular file"),
    ("not-published-by-hetflow", "copy", True, True, False, "user", None, "refuse", "not published by hetflow"),
    ("own-result-unchanged", "copy", True, True, False, "old", rec(), "replace", "result from run run-1"),
    ("own-result-link-mode", "link", True, True, False, "old", rec(), "replace", "result from run run-1"),
    ("own-result-edited-since", "copy", True, True, False, "edited", rec(), "refuse", "changed since run run-1"),
    ("another-workflows-result", "copy", True, True, False, "old", rec("other"), "refuse", "workflow 'other'"),
]


@pytest.mark.parametrize(
    ("mode", "present", "regular", "identical", "there", "record", "action", "why"),
    [r[1:] for r in RULE],
    ids=[r[0] for r in RULE],
)
def test_the_rule_of_what_may_be_replaced(
    mode: str,
    present: bool,
    regular: bool,
    identical: bool,
    there: str,
    record: PublishRecord | None,
    action: str,
    why: str,
) -> None:
    v = decide(
        mode=mode,
        present=present,
        regular=regular,
        identical=identical,
        unchanged=record is not None and there == record.sha256,
        record=record,
        workflow="wf",
    )
    assert v.action == action and why in v.why


def one(tmp_path: Path, text: str) -> Path:
    out = tmp_path / f"out-{text.strip()}"
    out.mkdir()
    (out / "r.txt").write_text(text)
    return out


def test_a_workflow_replaces_its_own_unchanged_result_and_nothing_else(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "state.db")
    res = tmp_path / "res"
    st = step(str(res), names=("r.txt",))
    first = Publishing(store, "run-1", "wf")
    first("s", st, one(tmp_path, "one\n"), os.getuid(), os.getgid())
    r = store.published(str(res.resolve() / "r.txt"))
    assert r is not None and (r.run_id, r.workflow, r.step, r.size) == ("run-1", "wf", "s", 4)
    # a rerun of the same workflow with other bytes replaces its own result, and says whose
    done = Publishing(store, "run-2", "wf")("s", st, one(tmp_path, "two\n"), os.getuid(), os.getgid())
    assert (res / "r.txt").read_text() == "two\n" and "replaced this workflow's result from run run-1" in done[0]
    assert store.published(str(res.resolve() / "r.txt")).run_id == "run-2"  # type: ignore[union-attr]
    # another workflow's result is not this one's to replace
    with pytest.raises(PublishError, match=r"published by workflow 'wf' \(run run-2\), not this one"):
        Publishing(store, "run-3", "other")("s", st, one(tmp_path, "three\n"), os.getuid(), os.getgid())
    # the same bytes published by another workflow leave the record with the workflow that wrote them
    Publishing(store, "run-x", "other")("s", st, tmp_path / "out-two", os.getuid(), os.getgid())
    assert store.published(str(res.resolve() / "r.txt")).run_id == "run-2"  # type: ignore[union-attr]
    # nor is a result edited since it was published
    (res / "r.txt").write_text("two, edited\n")
    with pytest.raises(PublishError, match=r"r\.txt already exists and changed since run run-2 published it"):
        Publishing(store, "run-4", "wf")("s", st, one(tmp_path, "four\n"), os.getuid(), os.getgid())
    assert (res / "r.txt").read_text() == "two, edited\n"
    assert sorted(p.name for p in res.iterdir()) == [LOCK_NAME, "r.txt"]  # no staged file left by a refusal


def test_s3_publish_replaces_its_own_object_by_its_recorded_etag(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "state.db")
    fs = FakeS3()
    st = step("s3://b/p/", names=("r.txt",))
    Publishing(store, "run-1", "wf", s3=lambda endpoint: fs)("s", st, one(tmp_path, "one\n"), 0, 0)
    Publishing(store, "run-2", "wf", s3=lambda endpoint: fs)("s", st, one(tmp_path, "two\n"), 0, 0)
    assert fs.objects["b/p/r.txt"] == b"two\n"
    fs.objects["b/p/r.txt"] = b"changed by someone"
    with pytest.raises(PublishError, match=r"s3://b/p/r\.txt already exists and changed since run run-2"):
        Publishing(store, "run-3", "wf", s3=lambda endpoint: fs)("s", st, one(tmp_path, "three\n"), 0, 0)
    assert fs.objects["b/p/r.txt"] == b"changed by someone"


class RacingS3(FakeS3):
    """Someone else writes the key just after hetflow checked it (before its upload)."""

    def __init__(self, sneak: bytes) -> None:
        super().__init__()
        self.sneak: bytes | None = sneak

    def info(self, path: str) -> dict[str, Any]:
        answer = super().info(path) if path in self.objects else {"ETag": ""}
        if self.sneak is not None:
            self.objects[path], self.sneak = self.sneak, None
        return answer

    def exists(self, path: str) -> bool:
        if self.sneak is not None and path not in self.objects:
            self.objects[path], self.sneak = self.sneak, None
            return False
        return path in self.objects


@pytest.mark.parametrize("before", [None, b"one\n"], ids=["new-key-taken-meanwhile", "own-object-replaced-meanwhile"])
def test_s3_an_object_written_by_someone_else_after_the_check_fails_the_publish(
    tmp_path: Path, before: bytes | None
) -> None:
    store = Store(tmp_path / "home" / "state.db")
    fs = RacingS3(b"someone else's")
    st = step("s3://b/p/", names=("r.txt",))
    if before is not None:
        fs.sneak = None
        Publishing(store, "run-1", "wf", s3=lambda endpoint: fs)("s", st, one(tmp_path, "one\n"), 0, 0)
        fs.sneak = b"someone else's"
    with pytest.raises(PublishError, match=r"s3://b/p/r\.txt was written by someone else while this run published it"):
        Publishing(store, "run-2", "wf", s3=lambda endpoint: fs)("s", st, one(tmp_path, "two\n"), 0, 0)
    assert fs.objects["b/p/r.txt"] == b"someone else's"


def test_a_store_from_before_publish_records_gains_the_table_on_open(tmp_path: Path) -> None:
    import sqlite3

    Store(tmp_path / "state.db").close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("DROP TABLE published")
    db.commit()
    db.close()
    store = Store(tmp_path / "state.db")
    store.record_published(PublishRecord("/t", "s", 1, "r", "st", "wf", 0.0))
    assert store.published("/t") == PublishRecord("/t", "s", 1, "r", "st", "wf", 0.0)


@pytest.mark.parametrize("mode", ["copy", "link", "overwrite"])
def test_a_folder_is_refused_in_every_mode(mode: str) -> None:
    kw: dict[str, Any] = {"present": True, "regular": False, "identical": False, "unchanged": False, "record": None}
    v = decide(mode=mode, workflow="wf", folder=True, **kw)
    assert (v.action, v.hint) == ("refuse", "remove it or publish elsewhere") and "folder" in v.why


# --- all or nothing (issue 37) ----------------------------------------------------------------


def pair(tmp_path: Path, a: str, b: str) -> Path:
    out = tmp_path / f"out-{a.strip()}-{b.strip()}"
    out.mkdir()
    (out / "a.txt").write_text(a)
    (out / "b.txt").write_text(b)
    return out


def two(to: str, mode: str = "copy") -> Step:
    return Step(image="i", outputs=("a.txt", "b.txt"), publish=(Publish(to=to, mode=mode),))  # type: ignore[arg-type]


def no_leftovers(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.endswith((".hetflow-tmp", ".hetflow-old"))]


def test_every_target_is_judged_before_any_is_replaced_and_each_refusal_is_named(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "state.db")
    res = tmp_path / "res"
    Publishing(store, "run-1", "wf")("s", two(str(res)), pair(tmp_path, "a1\n", "b1\n"), os.getuid(), os.getgid())
    (res / "b.txt").write_text("edited\n")
    with pytest.raises(PublishError) as info:
        Publishing(store, "run-2", "wf")("s", two(str(res)), pair(tmp_path, "a2\n", "b2\n"), os.getuid(), os.getgid())
    assert "'b.txt'" in str(info.value) and "'a.txt'" not in str(info.value)
    assert "none of its 2 was published" in str(info.value)
    assert (res / "a.txt").read_text() == "a1\n" and (res / "b.txt").read_text() == "edited\n"
    assert store.published(str(res.resolve() / "a.txt")).run_id == "run-1"  # type: ignore[union-attr]
    (res / "a.txt").write_text("edited too\n")
    with pytest.raises(PublishError, match=r"publish 'a.txt': .* changed since .*; publish 'b.txt': .* changed since"):
        Publishing(store, "run-3", "wf")("s", two(str(res)), pair(tmp_path, "a3\n", "b3\n"), os.getuid(), os.getgid())
    assert no_leftovers(res) and not list((tmp_path / "home" / "publishing").iterdir())


def test_a_rename_failing_halfway_puts_back_the_targets_already_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "home" / "state.db")
    res = tmp_path / "res"
    Publishing(store, "run-1", "wf")("s", two(str(res)), pair(tmp_path, "a1\n", "b1\n"), os.getuid(), os.getgid())
    rename = os.replace

    def failing(src: Any, dst: Any) -> None:
        if Path(dst) == res / "b.txt" and str(src).endswith(".hetflow-tmp"):  # its rename, not its undo
            raise OSError(5, "Input/output error")
        rename(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(PublishError) as info:
        Publishing(store, "run-2", "wf")("s", two(str(res)), pair(tmp_path, "a2\n", "b2\n"), os.getuid(), os.getgid())
    monkeypatch.undo()
    assert "publish 'b.txt'" in str(info.value) and "Input/output error" in str(info.value)
    assert "'a.txt' put back as it was" in str(info.value)
    assert (res / "a.txt").read_text() == "a1\n" and (res / "b.txt").read_text() == "b1\n"
    assert store.published(str(res.resolve() / "a.txt")).run_id == "run-1"  # type: ignore[union-attr]
    assert no_leftovers(res) and not list((tmp_path / "home" / "publishing").iterdir())


class RacingSecond(FakeS3):
    """Someone else writes the second key after hetflow checked it: the first is in by then."""

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        if rpath.endswith("b.txt"):
            self.objects[rpath] = b"someone else's"
        super().put_file(lpath, rpath, **kwargs)


def test_s3_checks_every_key_first_and_puts_back_from_kept_copies_when_one_fails(tmp_path: Path) -> None:
    store = Store(tmp_path / "home" / "state.db")
    fs = RacingSecond()
    fs.objects |= {"b/p/a.txt": b"a0\n"}
    out = pair(tmp_path, "a1\n", "b1\n")
    with pytest.raises(PublishError, match=r"s3://b/p/a.txt already exists and was not published by hetflow"):
        Publishing(store, "run-1", "wf", s3=lambda e: fs)("s", two("s3://b/p/"), out, 0, 0)
    assert fs.objects == {"b/p/a.txt": b"a0\n"}  # b.txt, which could be written, was not
    with pytest.raises(PublishError) as info:
        Publishing(store, "run-1", "wf", s3=lambda e: fs)("s", two("s3://b/p/", "overwrite"), out, 0, 0)
    assert "s3://b/p/b.txt was written by someone else" in str(info.value) and "'a.txt' put back" in str(info.value)
    assert fs.objects == {"b/p/a.txt": b"a0\n", "b/p/b.txt": b"someone else's"}  # no kept copy left


def test_a_journal_left_by_a_killed_publish_is_undone_or_finished(tmp_path: Path) -> None:
    from hetflow.execute.data.publishing import journal as publishjournal
    from hetflow.execute.data.publishing.rule import By, Entry

    store = Store(tmp_path / "home" / "state.db")
    res = tmp_path / "res"
    res.mkdir()
    by = By("run-k", "wf", "s")

    def entry(name: str, action: str, new: str) -> Entry:
        src = tmp_path / f"src-{name}"
        src.write_text(new)
        return Entry(
            name, str(src), str(res / name), "copy", hashlib.sha256(new.encode()).hexdigest(), 3, "tok", None, action
        )

    # replaced (kept copy beside it), written new, staged only: the state of a kill before the records
    (res / "r.txt").write_text("new")
    (res / ".r.txt.tok.hetflow-old").write_text("old")
    (res / "w.txt").write_text("new")
    (res / ".s.txt.tok.hetflow-tmp").write_text("new")
    (res / "s.txt").write_text("user")
    entries = [entry("r.txt", "replace", "new"), entry("w.txt", "write", "new"), entry("s.txt", "replace", "new")]
    publishjournal.write(publishjournal.journal_path(store, by), by, entries)
    [j] = publishjournal.journals(store)
    assert sorted(Path(p).name for p in publishjournal.leftovers(j)) == [
        ".r.txt.tok.hetflow-old",
        ".s.txt.tok.hetflow-tmp",
    ]
    assert "undid" in publishjournal.settle(j, store)
    assert sorted(p.name for p in res.iterdir() if p.name != LOCK_NAME) == ["r.txt", "s.txt"]
    assert (res / "r.txt").read_text() == "old" and (res / "s.txt").read_text() == "user"
    assert publishjournal.journals(store) == []
    # the records written (the commit point): what is in place stays, the leftovers go
    (res / ".r.txt.tok.hetflow-old").write_text("old")
    (res / "r.txt").write_text("new")
    publishjournal.write(publishjournal.journal_path(store, by), by, entries[:1])
    store.record_published(PublishRecord(entries[0].key, entries[0].sha256, 3, "run-k", "s", "wf", 0.0))
    assert "finished" in publishjournal.settle(publishjournal.journals(store)[0], store)
    assert (res / "r.txt").read_text() == "new" and no_leftovers(res)
