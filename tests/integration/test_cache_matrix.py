"""The cross-run cache, case by case: a second run reuses a step's result exactly when
nothing that decides it changed (image content, command, env, variant, input content),
and reruns it (and what reads it) otherwise.  Real podman containers; a private image tag
so one case can rebuild it.  "reused" = the step has no attempt and says where its result
came from; "ran" = it ran in a container."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from demo.images import build_tiny_image

from tests.integration.hfkit import Hetflow, write

IMAGE = "localhost/hetflow-test/cachecase:latest"

BASE = f"""apiVersion: hetflow/v1
name: cachecase
params: {{word: hello}}
data:
  src: src.txt
steps:
  up:
    image: {IMAGE}
    inputs: {{s: data.src}}
    command: [sh, -c, "cat /in/s/src.txt > /out/u.txt; echo {{{{ params.word }}}} >> /out/u.txt"]
    outputs: [u.txt]
  down:
    image: {IMAGE}
    inputs: {{u: up/u.txt}}
    env: {{MODE: a}}
    resources: {{cpus: 1, memory: 64Mi}}
    command: [sh, -c, "cat /in/u/u.txt > /out/d.txt; echo $MODE >> /out/d.txt"]
    outputs: [d.txt]
"""


@dataclass
class Ctx:
    hf: Hetflow
    dir: Path
    text: str = BASE
    args: list[str] = field(default_factory=list)

    def edit(self, old: str, new: str) -> None:
        assert old in self.text, old
        self.text = self.text.replace(old, new)


def _same_mtime_new_content(c: Ctx) -> None:
    src = c.dir / "src.txt"
    st = src.stat()
    src.write_text("HELLO\n")  # same size, other bytes
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the old mtime put back
    assert src.stat().st_mtime_ns == st.st_mtime_ns


def _touch(c: Ctx) -> None:
    src = c.dir / "src.txt"
    os.utime(src, (src.stat().st_atime + 100, src.stat().st_mtime + 100))


def _objects(c: Ctx) -> list[Path]:
    found = [p for p in (c.hf.home / "cache" / "objects").rglob("*") if p.is_file()]
    assert found
    return found


def _delete_objects(c: Ctx) -> None:
    for p in _objects(c):
        p.unlink()


def _corrupt_objects(c: Ctx) -> None:
    for p in _objects(c):
        with p.open("ab") as f:
            f.write(b"x")


def _rebuild_image(c: Ctx) -> None:
    before = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", IMAGE], capture_output=True, text=True
    )
    build_tiny_image(IMAGE, env={"REVISION": "2"})
    after = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", IMAGE], capture_output=True, text=True)
    assert before.stdout != after.stdout  # a new image under the same tag


Change = Callable[[Ctx], None]
CASES: list[tuple[str, Change, str, str]] = [
    ("nothing-changed", lambda c: None, "reused", "reused"),
    ("image-rebuilt-same-tag", _rebuild_image, "ran", "ran"),
    ("input-file-changed-same-name-size-and-mtime", _same_mtime_new_content, "ran", "ran"),
    ("input-file-touched-only", _touch, "reused", "reused"),
    ("param-changed", lambda c: c.args.extend(["-p", "word=bye"]), "ran", "ran"),
    ("env-changed", lambda c: c.edit("MODE: a", "MODE: b"), "reused", "ran"),
    (
        "upstream-rerun-with-identical-output",
        lambda c: c.edit("> /out/u.txt; echo", ">/out/u.txt;  echo"),
        "ran",
        "reused",
    ),
    (
        "variant-changed",
        lambda c: c.edit(
            f"    image: {IMAGE}\n    inputs: {{u: up/u.txt}}\n    env: {{MODE: a}}\n"
            "    resources: {cpus: 1, memory: 64Mi}\n"
            '    command: [sh, -c, "cat /in/u/u.txt > /out/d.txt; echo $MODE >> /out/d.txt"]\n',
            "    inputs: {u: up/u.txt}\n    env: {MODE: a}\n    variants:\n      cpu:\n"
            f"        image: {IMAGE}\n"
            '        command: [sh, -c, "cat /in/u/u.txt > /out/d.txt; echo $MODE >> /out/d.txt"]\n',
        ),
        "reused",
        "ran",
    ),
    (
        "yaml-layout-only",
        lambda c: c.edit("outputs: [d.txt]", "outputs:\n      -   d.txt   # the result"),
        "reused",
        "reused",
    ),
    (
        "whitespace-inside-an-argument",
        lambda c: c.edit("> /out/d.txt; echo $MODE", ">  /out/d.txt; echo $MODE"),
        "reused",
        "ran",
    ),
    ("cache-objects-deleted", _delete_objects, "ran", "ran"),
    ("cache-objects-corrupted", _corrupt_objects, "ran", "ran"),
    (
        "cache-false-on-the-step",
        lambda c: c.edit("    env: {MODE: a}", "    env: {MODE: a}\n    cache: false"),
        "reused",
        "ran",
    ),
    ("no-cache-flag", lambda c: c.args.append("--no-cache"), "ran", "ran"),
    (
        "cpus-and-memory-changed",
        lambda c: c.edit("{cpus: 1, memory: 64Mi}", "{cpus: 0.5, memory: 128Mi}"),
        "reused",
        "reused",
    ),
    (
        "retries-changed",
        lambda c: c.edit("    outputs: [d.txt]", "    retries: 3\n    outputs: [d.txt]"),
        "reused",
        "reused",
    ),
]


@pytest.fixture(scope="module")
def cache_image() -> str:
    return build_tiny_image(IMAGE, env={"REVISION": "1"}, force=True)


def outcome(step: dict[str, object]) -> str:
    if step["attempts"] == 0 and str(step["reason"]).startswith("cached: from run"):
        return "reused"
    assert step["attempts"] == 1, step
    return "ran"


def run(hf: Hetflow, *args: str) -> dict[str, Any]:
    """``hetflow run -q ARGS``, then ``hetflow show --json`` of that run (its id from the
    run's own last line: one command less than ``hetflow ps``)."""
    said = hf("run", "-q", *args).stdout
    ran = re.search(r"^run (\S+) succeeded in ", said, re.MULTILINE)
    assert ran, said
    return hf.show(ran[1])


@pytest.mark.parametrize(("change", "up", "down"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_second_run_reuses_exactly_what_did_not_change(
    hf: Hetflow, tmp_path: Path, cache_image: str, change: Change, up: str, down: str
) -> None:
    build_tiny_image(IMAGE, env={"REVISION": "1"})  # a case before may have rebuilt it
    (tmp_path / "src.txt").write_text("hello\n")
    ctx = Ctx(hf, tmp_path)
    first = run(hf, write(tmp_path, ctx.text))
    assert [outcome(s) for s in first["steps"]] == ["ran", "ran"]
    change(ctx)
    second = run(hf, *ctx.args, write(tmp_path, ctx.text))
    assert second["id"] != first["id"]
    steps = {s["step"]: s for s in second["steps"]}
    assert (outcome(steps["up"]), outcome(steps["down"])) == (up, down)
    # whatever happened, the results are the ones this run's inputs give
    expected_up = (tmp_path / "src.txt").read_text() + ("bye\n" if "word=bye" in ctx.args else "hello\n")
    out = Path(second["workdir"]) / "steps"  # as hfkit.step_out reads it
    assert (out / "up" / "out" / "u.txt").read_text() == expected_up
    mode = "b" if "MODE: b" in ctx.text else "a"
    assert (out / "down" / "out" / "d.txt").read_text() == expected_up + mode + "\n"
