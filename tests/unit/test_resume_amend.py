"""What a resume does with an edited workflow (``execute.amend.compare``), as a table: each
edit of a run where ``a`` and ``b`` (b needs a's output) succeeded and ``f`` failed.  Plus
the store's part: the amended run, and the attempts' workflow_version column on an older store."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from hetflow.errors import StateError
from hetflow.execute.data.cachekey import Key, cache_key
from hetflow.execute.submit.amend import ADDED, CHANGED, DOWNSTREAM, EDITED, KEPT, REMOVED, Change, compare, key_parts
from hetflow.execute.submit.record import create_run
from hetflow.execute.submit.session import LocalEngine, edited_since, load_recorded, resume_run
from hetflow.spec import Workflow, load_workflow
from hetflow.state import AttemptRecord, StepRecord, Store
from tests.unit.builders import node

BASE = """apiVersion: hetflow/v1
name: wf
steps:
  a:
    image: img:1
    command: [sh, -c, "echo a > /out/a.txt"]
    env: {MODE: fast}
    outputs: [a.txt]
    resources: {cpus: 1}
  b:
    image: img:1
    inputs: {a: a/a.txt}
    command: [sh, -c, "cat /in/a/* > /out/b.txt"]
    outputs: [b.txt]
  f:
    image: img:1
    command: [sh, -c, "exit 1"]
    outputs: [f.txt]
    publish: {to: results}
"""


def _load(tmp_path: Path, text: str, name: str) -> Workflow:
    p = tmp_path / name
    p.write_text(text)
    return load_workflow(p).workflow


def _key_of(wf: Workflow, name: str, variant: str) -> Key | None:
    """The cache key with the image's name as its identity and the inputs' references as
    their content (the session reads both from the engine and the store)."""
    step = wf.steps[name]
    v = step.resolved_variants().get(variant)
    if v is None:
        return None
    return cache_key(
        workflow=wf.name,
        step_name=name,
        step=step,
        variant_name=variant,
        variant=v,
        image_identity=v.image,
        inputs=dict(step.inputs),
    )


def _record(step: str, state: str) -> StepRecord:
    return StepRecord("r1", step, state, "default", "vm", (), 1, 0, None, None, "", None)


STEPS = [_record("a", "succeeded"), _record("b", "succeeded"), _record("f", "failed")]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(BASE, BASE, [], id="unchanged"),
        pytest.param(BASE, BASE.replace("env: {MODE: fast}", "env: {MODE: fast}  # a comment"), [], id="comment-only"),
        pytest.param(
            BASE,
            BASE.replace('"echo a >', '"echo A >'),
            [Change("a", CHANGED, ("command",)), Change("b", DOWNSTREAM, ("a",))],
            id="command-edit-reruns-step-and-descendants",
        ),
        pytest.param(
            BASE,
            BASE.replace("MODE: fast", "MODE: slow"),
            [Change("a", CHANGED, ("env",)), Change("b", DOWNSTREAM, ("a",))],
            id="env-edit",
        ),
        pytest.param(
            BASE,
            BASE.replace('image: img:1\n    command: [sh, -c, "echo a', 'image: img:2\n    command: [sh, -c, "echo a'),
            [Change("a", CHANGED, ("image identity",)), Change("b", DOWNSTREAM, ("a",))],
            id="image-edit",
        ),
        pytest.param(
            BASE,
            BASE.replace("outputs: [b.txt]", "outputs: [b.txt, more.txt]"),
            [Change("b", CHANGED, ("outputs",))],
            id="outputs-edit-of-a-leaf",
        ),
        pytest.param(
            BASE,
            BASE.replace("resources: {cpus: 1}", "resources: {cpus: 2}"),
            [Change("a", KEPT, ("resources",))],
            id="resources-edit-of-succeeded-step-kept",
        ),
        pytest.param(
            BASE,
            BASE.replace("publish: {to: results}", "publish: {to: results, mode: overwrite}"),
            [Change("f", EDITED, ("publish",))],
            id="publish-edit-of-failed-step-takes-effect",
        ),
        pytest.param(
            BASE,
            BASE.replace("    outputs: [b.txt]\n", "    outputs: [b.txt]\n    retries: 2\n"),
            [Change("b", KEPT, ("retries",))],
            id="retries-edit-of-succeeded-step-kept",
        ),
        pytest.param(
            BASE,
            BASE + "  g:\n    image: img:1\n    command: [true]\n",
            [Change("g", ADDED)],
            id="new-step-added",
        ),
        pytest.param(
            BASE,
            BASE[: BASE.index("  f:\n")],
            [Change("f", REMOVED)],
            id="removed-step-dropped",
        ),
        pytest.param(
            BASE,
            BASE.replace(
                '    image: img:1\n    inputs: {a: a/a.txt}\n    command: [sh, -c, "cat /in/a/* > /out/b.txt"]\n',
                "    inputs: {a: a/a.txt}\n    variants:\n      gpu: {image: img:1, command: [cat, /in/a/a.txt]}\n",
            ),
            [Change("b", CHANGED, ("variant",))],
            id="variant-that-ran-is-gone",
        ),
    ],
)
def test_compare(tmp_path: Path, old: str, new: str, expected: list[Change]) -> None:
    amendment = compare(_load(tmp_path, old, "old.yaml"), _load(tmp_path, new, "new.yaml"), STEPS, _key_of)
    assert list(amendment.changes) == expected


def test_each_change_says_what_happens_to_the_step() -> None:
    assert Change("a", CHANGED, ("command", "env")).text() == "a: changed (command, env): runs again"
    assert Change("f", EDITED, ("publish",)).text() == "f: definition of publish changed: takes effect as it runs again"
    assert "not re-published" in Change("a", KEPT, ("publish",)).text()


def test_key_parts_of_equal_keys_is_empty() -> None:
    wf = Workflow.model_validate(
        {"apiVersion": "hetflow/v1", "name": "w", "steps": {"s": {"image": "i", "command": ["true"]}}}
    )
    key = _key_of(wf, "s", "default")
    assert key_parts(key, key) == ()
    assert key_parts(key, None) == ("variant",)


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "state.db")
    store.create_run(
        run_id="r1",
        name="wf",
        workflow_file="/wf.yaml",
        spec_json="{}",
        params_json="{}",
        uid=0,
        gid=0,
        workdir=str(tmp_path / "r1"),
        steps=["a", "f"],
    )
    return store


def test_amend_run_drops_and_adds_steps_and_replaces_the_plan(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.amend_run(
        "r1", spec_json='{"x": 1}', plan_json='{"kind": "local"}', add=["g"], drop=["f"], expansions=(), message="v2"
    )
    assert [s.step for s in store.steps("r1")] == ["a", "g"]
    assert store.plan_json("r1") == '{"kind": "local"}'
    assert store.run("r1").spec_json == '{"x": 1}'
    assert any(e.message == "v2" for e in store.events("r1"))


def _attempt(version: int | None, n: int = 1) -> AttemptRecord:
    return AttemptRecord(
        run_id="r1",
        step="a",
        attempt=n,
        variant="default",
        node="vm",
        gpus=(),
        gpu_uuids=(),
        container=f"hf-r1-a-{n}",
        image="img",
        state="launching",
        exit_code=None,
        started=float(n),
        ended=None,
        message="",
        workflow_version=version,
    )


@pytest.mark.parametrize("version", [pytest.param(2, id="known"), pytest.param(None, id="unknown")])
def test_an_attempt_keeps_its_workflow_version(tmp_path: Path, version: int | None) -> None:
    store = _store(tmp_path)
    store.add_attempt(_attempt(version))
    assert store.attempts("r1")[0].workflow_version == version


def test_an_older_store_gains_the_workflow_version_column_and_its_attempts_read_as_unknown(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.add_attempt(_attempt(1))
    store.close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("ALTER TABLE attempts DROP COLUMN workflow_version")  # as an older hetflow wrote it
    db.commit()
    db.close()
    old = Store(tmp_path / "state.db", read_only=True)
    assert old.attempts("r1")[0].workflow_version is None  # read-only: not migrated, still readable
    old.close()
    store = Store(tmp_path / "state.db")
    assert store.attempts("r1")[0].workflow_version is None
    store.add_attempt(_attempt(2, n=2))
    assert [a.workflow_version for a in store.attempts("r1")] == [None, 2]


SMALL = """apiVersion: hetflow/v1
name: wf
steps:
  s:
    image: img:1
    command: [sh, -c, "exit 1"]
"""


def _recorded_run(tmp_path: Path, backend_json: str, *, data: str = "", pid: int | None = None) -> tuple[Store, Path]:
    """A failed run recorded from ``wf.yaml`` (its copy in the run's directory)."""
    wf = tmp_path / "wf.yaml"
    wf.write_text(SMALL + data)
    workdir = tmp_path / "work" / "r1"
    workdir.mkdir(parents=True)
    (workdir / "workflow.yaml").write_text(SMALL + data)
    store = Store(tmp_path / "state.db")
    store.create_run(
        run_id="r1",
        name="wf",
        workflow_file=str(wf),
        spec_json="{}",
        params_json="{}",
        uid=0,
        gid=0,
        workdir=str(workdir),
        steps=["s"],
        backend=json.loads(backend_json).get("backend", "local"),
        backend_json=backend_json,
    )
    store.set_step("r1", "s", state="failed")
    if pid is not None:
        store.set_run("r1", state="running", pid=pid)
    return store, wf


@pytest.mark.parametrize(
    ("backend_json", "data", "pid", "message"),
    [
        pytest.param(
            '{"backend": "slurm", "cluster": "/c.yaml"}',
            "",
            None,
            "applying an edit to a run on slurm is not supported: resume it as recorded"
            " (hetflow resume r1 --as-recorded)",
            id="cluster-backend",
        ),
        pytest.param(
            "{}",
            "data:\n  docs: {path: docs}\n",
            None,
            "its 'data' differs; resume does not fetch data again",
            id="data-changed",
        ),
        pytest.param(
            "{}",
            "",
            os.getppid(),  # alive, and not this process: another executor holds the run
            "wait for it to end, or 'hetflow stop r1' stops it",  # refused before the edit is read
            id="executor-alive",
        ),
    ],
)
def test_resume_refuses_an_edit_it_cannot_apply_and_changes_nothing(
    tmp_path: Path, backend_json: str, data: str, pid: int | None, message: str
) -> None:
    store, wf = _recorded_run(tmp_path, backend_json, pid=pid)
    (tmp_path / "docs").mkdir()
    wf.write_text(SMALL.replace("exit 1", "exit 0") + data)
    with pytest.raises(StateError, match=re.escape(message)):
        resume_run(store, "r1", node(), engine=cast(LocalEngine, object()))
    assert [(s.step, s.state) for s in store.steps("r1")] == [("s", "failed")]
    assert not (tmp_path / "work" / "r1" / "workflow.v1.yaml").exists()
    assert "exit 1" in (tmp_path / "work" / "r1" / "workflow.yaml").read_text()


INCLUDING = """apiVersion: hetflow/v1
name: inc
include: [lib/templates.yaml]
steps:
  s: {use: t}
"""


@pytest.mark.parametrize(
    "after",
    [
        lambda lib: lib.write_text("templates:\n  t: {image: localhost/changed:2}\n"),
        lambda lib: lib.unlink(),
    ],
    ids=["include-edited", "include-removed"],
)
def test_a_runs_include_files_are_recorded_with_it_and_read_from_there(
    tmp_path: Path, after: Callable[[Path], None]
) -> None:
    lib = tmp_path / "lib" / "templates.yaml"
    lib.parent.mkdir()
    lib.write_text("templates:\n  t: {image: localhost/recorded:1, command: [true]}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(INCLUDING)
    store = Store(tmp_path / "state.db")
    run = create_run(store, load_workflow(wf), tmp_path / "home", 0, 0)
    after(lib)
    # the run's own copy (a detached executor, resume --as-recorded) reads what it was submitted with
    assert load_recorded(store, run.id).workflow.steps["s"].image == "localhost/recorded:1"
    # the file as it is now is an edit: a plain resume sees it (and applies or refuses it)
    assert edited_since(store, run.id) == lib.exists()
