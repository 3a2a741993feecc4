"""Container logs in podman's k8s-file format, and accepting a step's outputs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from hetflow.execute.data.outputs import accept_outputs, damaged_outputs, missing_outputs, sha256_of
from hetflow.execute.logs import log_tail, parse_line, read_lines
from hetflow.state.models import OutputRecord

T = "2024-05-01T10:00:00.123456789Z"

LINES = [
    pytest.param(f"{T} stdout F hello world\n", (T, "stdout", False, "hello world"), id="full-line"),
    pytest.param(f"{T} stderr P part", (T, "stderr", True, "part"), id="partial"),
    pytest.param(f"{T} stdout F  two  spaces ", (T, "stdout", False, " two  spaces "), id="spaces-kept"),
    pytest.param(f"{T} stdout F", (T, "stdout", False, ""), id="empty-text"),
    pytest.param(f"{T} journal F x", None, id="unknown-stream"),
    pytest.param("not a log line", None, id="garbage"),
    pytest.param("", None, id="empty"),
]


@pytest.mark.parametrize(("raw", "parsed"), LINES)
def test_parse_line(raw: str, parsed: tuple[str, str, bool, str] | None) -> None:
    assert parse_line(raw) == parsed


def log(*records: str) -> str:
    return "".join(f"{T} {r}\n" for r in records)


READS = [
    pytest.param(log("stdout F one", "stderr F two"), [("stdout", "one"), ("stderr", "two")], id="two-lines"),
    pytest.param(
        log("stdout P he", "stdout P ll", "stdout F o", "stdout F next"),
        [("stdout", "hello"), ("stdout", "next")],
        id="partials-joined",
    ),
    pytest.param(log("stdout F done") + f"{T} stdout F no newli", [("stdout", "done")], id="unfinished-record-left"),
    pytest.param(log("stdout F a", "junk", "stdout F b"), [("stdout", "a"), ("stdout", "b")], id="junk-skipped"),
    pytest.param("", [], id="empty-file"),
]


@pytest.mark.parametrize(("text", "lines"), READS)
def test_read_lines(tmp_path: Path, text: str, lines: list[tuple[str, str]]) -> None:
    path = tmp_path / "a.1.log"
    path.write_text(text)

    got, offset = read_lines(path)

    assert got == lines
    assert offset == text.rfind("\n") + 1  # up to the last complete record


def test_read_lines_continues_from_an_offset(tmp_path: Path) -> None:
    path = tmp_path / "a.1.log"
    path.write_text(log("stdout F one") + f"{T} stdout F tw")
    first, offset = read_lines(path)
    with path.open("a") as f:
        f.write("o\n" + log("stderr F three"))

    second, end = read_lines(path, offset)

    assert (first, second) == ([("stdout", "one")], [("stdout", "two"), ("stderr", "three")])
    assert end == path.stat().st_size
    assert read_lines(path, end) == ([], end)


def test_read_lines_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_lines(tmp_path / "nope.log", 7) == ([], 7)


def test_a_partial_record_at_the_end_is_read_again_with_its_continuation(tmp_path: Path) -> None:
    path = tmp_path / "a.1.log"
    path.write_text(log("stdout F one", "stdout P hel"))
    first, offset = read_lines(path)
    with path.open("a") as f:
        f.write(log("stdout F lo"))

    second, _ = read_lines(path, offset)

    assert first + second == [("stdout", "one"), ("stdout", "hello")]


def test_log_tail_is_the_last_non_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.1.log"
    path.write_text(log("stdout F first", "stdout F second", "stderr F oops", "stdout F "))

    assert log_tail(path, 3) == ["second", "oops"]
    assert log_tail(tmp_path / "none.log", 3) == []


# --- outputs -------------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_staging(root: Path) -> Path:
    staging = root / "attempts" / "s" / "1" / "out"
    (staging / "dir" / "sub").mkdir(parents=True)
    (staging / "m.npy").write_bytes(b"matrix")
    (staging / "dir" / "a.txt").write_bytes(b"A")
    (staging / "dir" / "sub" / "b.txt").write_bytes(b"BB")
    return staging


def test_sha256_of_a_directory_hashes_sorted_relative_paths_and_contents(tmp_path: Path) -> None:
    staging = make_staging(tmp_path)

    expected = sha(f"a.txt {sha(b'A')}\nsub/b.txt {sha(b'BB')}\n".encode())
    assert sha256_of(staging / "dir") == expected
    (staging / "dir" / "sub" / "b.txt").rename(staging / "dir" / "b.txt")
    assert sha256_of(staging / "dir") != expected  # a move is a change


def test_missing_outputs(tmp_path: Path) -> None:
    staging = make_staging(tmp_path)

    assert missing_outputs(staging, ["m.npy", "dir", "dir/sub/b.txt", "n.npy", "dir/c.txt"]) == ["n.npy", "dir/c.txt"]


def test_accept_outputs_moves_staging_into_place_and_replaces_old_outputs(tmp_path: Path) -> None:
    staging = make_staging(tmp_path)
    final = tmp_path / "steps" / "s" / "out"
    final.mkdir(parents=True)
    (final / "stale.txt").write_text("from an earlier attempt")

    records = accept_outputs("r1", "s", staging, final, ["m.npy", "dir"], attempt=1)

    assert records == [
        OutputRecord("r1", "s", "m.npy", sha(b"matrix"), 6, str(final / "m.npy")),
        OutputRecord("r1", "s", "dir", sha256_of(final / "dir"), 3, str(final / "dir")),
    ]
    assert sorted(p.name for p in final.iterdir()) == ["dir", "m.npy"]
    assert not staging.exists() and not staging.parent.exists()
    assert not (final.parent / "out.old").exists()
    assert damaged_outputs(records) == []


DAMAGE = [
    pytest.param(lambda f: (f / "m.npy").write_bytes(b"other"), ["m.npy"], id="file-changed"),
    pytest.param(lambda f: (f / "m.npy").unlink(), ["m.npy"], id="file-deleted"),
    pytest.param(lambda f: (f / "dir" / "new.txt").write_text("x"), ["dir"], id="file-added-to-dir"),
    pytest.param(lambda f: (f / "m.npy").touch(), [], id="only-mtime-changed"),
]


@pytest.mark.parametrize(("damage", "bad"), DAMAGE)
def test_damaged_outputs(tmp_path: Path, damage: Callable[[Path], object], bad: list[str]) -> None:
    final = tmp_path / "steps" / "s" / "out"
    records = accept_outputs("r1", "s", make_staging(tmp_path), final, ["m.npy", "dir"], attempt=1)

    damage(final)

    assert damaged_outputs(records) == bad
