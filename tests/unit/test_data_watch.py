"""What ran is what was hashed (issue 37): ``DataWatch`` looks at a step's host data again as
it launches and once it has ended, and ``amend.compare_data`` says what a resume runs again."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from hetflow.execute.data.inputs import DataManifest, Located, NoMemo, resolve_host
from hetflow.execute.data.watch import DataWatch
from hetflow.execute.submit.amend import DATA, DOWNSTREAM, compare_data
from hetflow.spec import DataSet, Step, Workflow
from hetflow.state import SUCCEEDED, InputsSeen, StepRecord

WHERE = Located("wf.yaml", lambda _loc: 1)


def watch_of(tmp_path: Path, **sets: str) -> DataWatch:
    """A watch over data sets NAME=PATH (a file, a directory or a glob under tmp_path)."""
    defs = {name: DataSet(path=str(tmp_path / rel)) for name, rel in sets.items()}
    manifest = DataManifest({n: resolve_host(n, ds, NoMemo(), WHERE) for n, ds in defs.items()})
    return DataWatch(manifest, defs, NoMemo())


def step(**inputs: str) -> Step:
    return Step.model_validate({"image": "busybox", "command": ["true"], "inputs": inputs})


def edit(path: Path, text: str) -> None:
    path.write_text(text)


def replace_by_rename(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def edit_and_put_back(path: Path, _text: str) -> None:
    old = path.read_text()
    path.write_text("something else")
    path.write_text(old)


def add_file(path: Path, text: str) -> None:
    (path.parent / "new.txt").write_text(text)


def remove(path: Path, _text: str) -> None:
    path.unlink()


@pytest.mark.parametrize(
    "change",
    [edit, replace_by_rename, edit_and_put_back, add_file, remove],
    ids=["edited", "replaced-by-rename", "edited-and-put-back", "file-added", "file-removed"],
)
def test_a_change_after_the_launch_look_is_found_when_the_step_ends(
    tmp_path: Path, change: Callable[[Path, str], None]
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one")
    w = watch_of(tmp_path, d="d")
    s = step(x="data.d")
    launched = w.look(s)
    assert launched is not None
    change(tmp_path / "d" / "a.txt", "two")
    w.new_turn()
    assert w.changed_since(s, launched.fingerprint) == ["data.d"]


def test_nothing_is_found_when_nothing_moved_and_other_sets_are_not_blamed(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one")
    (tmp_path / "e.txt").write_text("e")
    w = watch_of(tmp_path, d="d", e="e.txt")
    s = step(x="data.d", y="data.e")
    launched = w.look(s)
    assert launched is not None
    w.new_turn()
    assert w.changed_since(s, launched.fingerprint) == []
    (tmp_path / "e.txt").write_text("E")
    w.new_turn()
    assert w.changed_since(s, launched.fingerprint) == ["data.e"]


def test_a_look_at_launch_finds_an_edit_since_submit_and_keys_the_new_content(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one")
    (tmp_path / "d" / "b.txt").write_text("b")
    w = watch_of(tmp_path, d="d")
    submitted = w.manifest.digest("data.d/a.txt")
    (tmp_path / "d" / "a.txt").write_text("two")
    look = w.look(step(x="data.d/a.txt"))
    assert look is not None
    assert look.digests["data.d/a.txt"] != submitted
    assert look.digests["data.d/a.txt"] == w.manifest.digest("data.d/a.txt")
    assert w.said() == ["data.d: a.txt changed"]
    assert w.said() == []  # said once
    # the file the step does not read is not listed: its entry is as submitted
    assert {f.rel for f in w.manifest.sets["d"].files} == {"a.txt", "b.txt"}


def test_a_glob_is_matched_again_at_launch(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "1.csv").write_text("1")
    w = watch_of(tmp_path, g="g/*.csv")
    (tmp_path / "g" / "2.csv").write_text("2")
    (tmp_path / "g" / "2.txt").write_text("not matched")
    look = w.look(step(x="data.g"))
    assert look is not None
    assert [f.rel for f in w.manifest.sets["g"].files] == ["1.csv", "2.csv"]
    assert w.said() == ["data.g: 2.csv added"]


def test_a_look_within_one_turn_lists_once_and_a_new_turn_lists_again(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("one")
    w = watch_of(tmp_path, f="f.txt")
    s = step(x="data.f")
    first = w.look(s)
    (tmp_path / "f.txt").write_text("two")
    assert w.look(s) == first  # the turn's listing
    w.new_turn()
    again = w.look(s)
    assert again is not None and first is not None and again.digests != first.digests


def record(name: str, state: str = SUCCEEDED) -> StepRecord:
    return StepRecord("r1", name, state, "default", "vm", (), 1, 0, 1.0, 2.0, "", None)


def chain() -> Workflow:
    return Workflow.model_validate(
        {
            "apiVersion": "hetflow/v1",
            "name": "w",
            "data": {"d": {"path": "/nonexistent"}},
            "steps": {
                "gen": {"image": "b", "command": ["true"], "inputs": {"s": "data.d"}, "outputs": ["o"]},
                "use": {"image": "b", "command": ["true"], "inputs": {"g": "gen/o"}, "outputs": ["o"]},
                "other": {"image": "b", "command": ["true"], "outputs": ["o"]},
            },
        }
    )


RERUN = {"gen": DATA, "use": DOWNSTREAM}  # gen runs again, and use, which reads its output


@pytest.mark.parametrize(
    ("now", "made_from", "rerun"),
    [
        ({"gen": {"data.d": "A"}}, {"gen": InputsSeen({"data.d": "A"})}, {}),
        ({"gen": {"data.d": "B"}}, {"gen": InputsSeen({"data.d": "A"})}, {"gen": DATA, "use": DOWNSTREAM}),
        (
            {"gen": {"data.d": "A"}},
            {"gen": InputsSeen({"data.d": "A"}, changed="data.d")},
            {"gen": DATA, "use": DOWNSTREAM},
        ),
    ],
    ids=["unchanged-kept", "changed-reruns-with-what-follows", "ran-while-it-changed-reruns"],
)
def test_resume_reruns_what_the_data_touches(
    now: dict[str, dict[str, str]], made_from: dict[str, InputsSeen], rerun: dict[str, str]
) -> None:
    steps = [record("gen"), record("use"), record("other")]
    amendment = compare_data(chain(), steps, now, made_from, {"d": "gen.sh changed"})
    assert {c.step: c.kind for c in amendment.changes} == rerun
    assert set(amendment.rerun) == set(rerun)
    if "gen" in rerun:
        text = next(c.text() for c in amendment.changes if c.step == "gen")
        assert "data.d" in text and "runs again" in text


def test_a_step_that_did_not_succeed_is_not_named_it_runs_anyway() -> None:
    steps = [record("gen", "failed"), record("use", "skipped"), record("other")]
    amendment = compare_data(chain(), steps, {"gen": {"data.d": "B"}}, {"gen": InputsSeen({"data.d": "A"})}, {})
    assert amendment.changes == ()
