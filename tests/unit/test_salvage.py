"""salvage_workflow (validate's one pass, issue 42): the schema errors and the reference
errors of a file together, in no more runs than one, and the sound steps built for the
run-time checks; a reference to a step set aside is not reported twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.errors import SpecError
from hetflow.spec import load_workflow, salvage_workflow

WORKFLOW = """apiVersion: hetflow/v1
name: w
steps:
  a:
    image: busybox
    command: [echo, "{{ params.nope }}"]
  b:
    image: busybox
    resources: {cpus: lots}
  c:
    image: busybox
    needs: [b, zz]
    inputs: {x: b/out.txt}
  d:
    image: busybox
    outputs: [d.txt]
  e:
    image: busybox
    inputs: {x: d/d.txt}
    when: "output('b/out.txt') == 'yes'"
"""


def _said(problems: list) -> list[tuple[int, str]]:
    return sorted((p.line, p.message) for p in problems if p.severity == "error")


def test_schema_and_reference_errors_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(WORKFLOW)
    with pytest.raises(SpecError) as first:  # what parse_workflow stops at: the schema error alone
        load_workflow(path)
    assert [p.line for p in first.value.problems] == [9]
    loaded, problems = salvage_workflow(path)
    said = _said(problems)
    assert [line for line, _ in said] == [6, 9, 12]
    assert "names no param" in said[0][1]
    assert "steps.b.resources.cpus" in said[1][1]
    assert said[2][1] == "step 'c' needs unknown step 'zz'"  # not 'b': b's own problem is on line 9
    assert loaded is not None
    # a (its bad param) and b (its schema) set aside; c lost only its reference to zz; e its condition on b
    assert sorted(loaded.workflow.steps) == ["c", "d", "e"]
    assert loaded.workflow.steps["c"].needs == ()
    assert loaded.workflow.steps["e"].when is None and loaded.workflow.steps["e"].inputs == {"x": "d/d.txt"}


def test_a_sound_file_salvages_whole(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(WORKFLOW.split("  a:")[0] + "  d:\n    image: busybox\n    outputs: [d.txt]\n")
    loaded, problems = salvage_workflow(path)
    assert loaded is not None and list(loaded.workflow.steps) == ["d"] and _said(problems) == []


@pytest.mark.parametrize(
    ("text", "line"),
    [("apiVersion: hetflow/v1\nsteps: [\n", 3), ("apiVersion: hetflow/v1\nname: 3\nbogus: 1\nsteps: {}\n", 3)],
    ids=["bad-yaml", "outside-steps"],
)
def test_nothing_to_build_still_reports(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text(text)
    loaded, problems = salvage_workflow(path)
    assert loaded is None and line in [p.line for p in problems]
