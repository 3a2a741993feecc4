"""Workflow data resolved at submit: host files, directories and globs listed and hashed (with
a memo that notices a file rewritten with its old mtime), S3 listed through a fake store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hetflow.errors import SpecError
from hetflow.execute import resolve_data
from hetflow.spec import parse_workflow

V1 = "apiVersion: hetflow/v1\nname: wf\n"


class Memo:
    def __init__(self) -> None:
        self.known: dict[str, str] = {}
        self.misses = 0

    def file_hash(self, key: str) -> str | None:
        return self.known.get(key)

    def remember_hash(self, key: str, sha256: str) -> None:
        self.misses += 1
        self.known[key] = sha256


def loaded(tmp_path: Path, data: str) -> Any:
    return parse_workflow(V1 + f"data:\n{data}\nsteps:\n  a:\n    image: x\n", "wf.yaml", base=tmp_path)


def test_globs_dirs_and_files_are_listed_relative_to_their_root(tmp_path: Path) -> None:
    (tmp_path / "in" / "sub").mkdir(parents=True)
    for rel in ("in/a.txt", "in/b.txt", "in/sub/c.txt", "in/skip.bin"):
        (tmp_path / rel).write_text(rel)
    plan = resolve_data(loaded(tmp_path, "  g: in/**/*.txt\n  d: in\n  f: in/a.txt"))
    assert [f.rel for f in plan.host["g"].files] == ["a.txt", "b.txt", "sub/c.txt"]
    assert [f.rel for f in plan.host["d"].files] == ["a.txt", "b.txt", "skip.bin", "sub/c.txt"]
    assert [f.rel for f in plan.host["f"].files] == ["a.txt"]


def test_an_empty_glob_and_a_missing_path_name_what_was_searched(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(SpecError) as info:
        resolve_data(loaded(tmp_path, "  g: in/*.fastq\n  m: nothere.txt"))
    text = str(info.value)
    assert f"'*.fastq' matched no file in {tmp_path / 'in'}" in text
    assert f"no such file or directory 'nothere.txt' in {tmp_path}" in text


def test_the_memo_skips_unchanged_files_and_notices_a_rewrite_with_the_old_mtime(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("one\n")
    memo = Memo()
    wf = loaded(tmp_path, "  a: a.txt")
    first = resolve_data(wf, memo=memo).host["a"].files[0].sha256
    resolve_data(wf, memo=memo)
    assert memo.misses == 1  # the unchanged file was not read again
    st = f.stat()
    f.write_text("two\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = resolve_data(wf, memo=memo).host["a"].files[0].sha256
    assert memo.misses == 2 and second != first


class FakeS3:
    def __init__(self, objects: dict[str, bytes] | None = None, fail: bool = False) -> None:
        self.objects, self.fail = objects or {}, fail

    def find(self, path: str, detail: bool = False) -> Any:
        if self.fail:
            raise PermissionError("Access Denied")
        return {k: {"size": len(v), "type": "file"} for k, v in self.objects.items() if k.startswith(path)}

    def info(self, path: str) -> Any:
        return {}

    def get_file(self, rpath: str, lpath: str) -> None:
        Path(lpath).write_bytes(self.objects[rpath])

    def put_file(self, lpath: str, rpath: str) -> None:
        pass

    def exists(self, path: str) -> bool:
        return path in self.objects


def test_s3_data_is_listed_then_fetched_and_a_refusal_names_the_url(tmp_path: Path) -> None:
    store = FakeS3({"b/p/x.txt": b"x", "b/p/deep/y.txt": b"yy", "b/other/z": b"z"})
    wf = loaded(tmp_path, "  s: s3://b/p/")
    plan = resolve_data(wf, s3=lambda endpoint: store)
    assert [rel for rel, _, _ in plan.s3["s"]] == ["deep/y.txt", "x.txt"]
    manifest = plan.fetch(wf, tmp_path / "run" / "data")
    assert (tmp_path / "run" / "data" / "s" / "deep" / "y.txt").read_bytes() == b"yy"
    assert manifest.sets["s"].files[0].url == "s3://b/p/deep/y.txt"
    with pytest.raises(SpecError, match="cannot list s3://b/p/: Access Denied"):
        resolve_data(wf, s3=lambda endpoint: FakeS3(fail=True))
    with pytest.raises(SpecError, match="holds no object"):
        resolve_data(loaded(tmp_path, "  s: s3://b/none/"), s3=lambda endpoint: store)
