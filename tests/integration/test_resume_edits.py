"""`hetflow resume` applies the workflow file as it is now (Nextflow's -resume): real podman
containers, the real CLI.  An edit that changes a step's cache key reruns that step and what
follows it; other edits (publish, resources) take effect for the steps that run again; a
file gone or broken stops the resume before anything is changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, write


def _attempts(hf: Hetflow, run_id: str) -> dict[str, int]:
    return {s["step"]: s["attempts"] for s in hf.show(run_id)["steps"]}


PUBLISH = f"""apiVersion: hetflow/v1
name: pub
steps:
  report:
    image: {BUSYBOX}
    command: [sh, -c, "echo new > /out/report.txt"]
    outputs: [report.txt]
    publish: {{to: results{{mode}}}}
"""


def test_resume_after_editing_publish_mode_publishes_with_the_new_mode(hf: Hetflow, tmp_path: Path) -> None:
    # the user's case: a different file is at the publish target, so the step fails on publish
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.txt").write_text("old\n")
    wf = write(tmp_path, PUBLISH.replace("{mode}", ""))
    first = hf("run", wf, "-q", check=False)
    assert first.returncode == 1
    run_id = hf.last_run()
    assert hf.step_states(run_id) == {"report": "failed"}
    assert "mode: overwrite" in json.dumps(hf.show(run_id))

    # the user follows the message, edits the file and resumes: the new mode is applied
    write(tmp_path, PUBLISH.replace("{mode}", ", mode: overwrite"))
    resumed = hf("resume", run_id, "-q")
    assert "report: definition of publish changed: takes effect as it runs again" in resumed.stderr
    assert (tmp_path / "results" / "report.txt").read_text() == "new\n"
    assert hf.step_states(run_id) == {"report": "succeeded"}
    assert _attempts(hf, run_id) == {"report": 2}


def _branches(b_says: str, f_exit: int, extra: str = "") -> str:
    """a -> b -> d, c on its own, f failing (or not): a run that fails, to resume."""
    return f"""apiVersion: hetflow/v1
name: branches
templates:
  bb: {{image: {BUSYBOX}}}
steps:
  a:
    use: bb
    command: [sh, -c, "echo a > /out/a.txt"]
    outputs: [a.txt]
  b:
    use: bb
    inputs: {{a: a/a.txt}}
    command: [sh, -c, "echo {b_says} > /out/b.txt"]
    outputs: [b.txt]
  d:
    use: bb
    inputs: {{b: b/b.txt}}
    command: [sh, -c, "cat /in/b/* > /out/d.txt"]
    outputs: [d.txt]
  c:
    use: bb
    command: [sh, -c, "echo c > /out/c.txt"]
    outputs: [c.txt]
  f:
    use: bb
    command: [sh, -c, "exit {f_exit}"]
{extra}"""


def test_resume_reruns_an_edited_step_and_its_descendants_and_keeps_the_rest(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, _branches("one", 1))
    assert hf("run", wf, "-q", "--no-cache", check=False).returncode == 1
    run_id = hf.last_run()
    assert hf.step_states(run_id)["f"] == "failed"

    write(tmp_path, _branches("two", 0))
    resumed = hf("resume", run_id, "-q")
    assert "b: changed (command): runs again" in resumed.stderr
    assert "d: runs again: upstream step b changed" in resumed.stderr
    said = [line.strip() for line in resumed.stderr.splitlines()]
    assert not [line for line in said if line.startswith(("a:", "c:"))]  # the kept steps are not named
    assert _attempts(hf, run_id) == {"a": 1, "b": 2, "d": 2, "c": 1, "f": 2}
    workdir = Path(hf.show(run_id)["workdir"])
    assert (workdir / "steps" / "d" / "out" / "d.txt").read_text() == "two\n"


def test_resume_adds_new_steps_and_drops_removed_ones(hf: Hetflow, tmp_path: Path) -> None:
    wf = write(tmp_path, _branches("one", 1))
    assert hf("run", wf, "-q", "--no-cache", check=False).returncode == 1
    run_id = hf.last_run()
    added = f"""  g:
    image: {BUSYBOX}
    inputs: {{c: c/c.txt}}
    command: [sh, -c, "cat /in/c/* > /out/g.txt"]
    outputs: [g.txt]
"""
    text = _branches("one", 0, added)
    write(tmp_path, text[: text.index("  f:\n")] + added)  # f removed, g added
    resumed = hf("resume", run_id, "-q")
    assert "f: removed from the workflow" in resumed.stderr
    assert "g: new step: runs" in resumed.stderr
    assert _attempts(hf, run_id) == {"a": 1, "b": 1, "d": 1, "c": 1, "g": 1}
    assert hf.show(run_id)["state"] == "succeeded"


def test_show_records_the_workflow_version_each_attempt_ran(hf: Hetflow, tmp_path: Path) -> None:
    first = f"""apiVersion: hetflow/v1
name: versions
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, "exit 3"]
"""
    wf = write(tmp_path, first)
    assert hf("run", wf, "-q", check=False).returncode == 1
    run_id = hf.last_run()
    write(tmp_path, first.replace("exit 3", "exit 0"))
    hf("resume", run_id, "-q")
    history = hf.show(run_id)["steps"][0]["attempt_history"]
    assert [(a["attempt"], a["workflow_version"]) for a in history] == [(1, 1), (2, 2)]
    assert "workflow v1: s#1; v2: s#2" in hf("show", run_id).stdout
    workdir = Path(hf.show(run_id)["workdir"])
    assert (workdir / "workflow.v1.yaml").read_text() == first
    assert "exit 0" in (workdir / "workflow.yaml").read_text()
    # a run that succeeded is not resumed: an edit since is pointed to a new run (and the cache)
    write(tmp_path, first.replace("exit 3", "true"))
    done = hf("resume", run_id)
    assert "already succeeded; nothing to resume" in done.stdout
    assert f"{wf} changed since: 'hetflow run {wf}' runs it again" in " ".join(done.stdout.split())  # long paths wrap


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda p: p.unlink(), id="file-deleted"),
        pytest.param(lambda p: p.write_text(p.read_text() + "  oops: [unclosed\n"), id="file-broken"),
    ],
)
def test_resume_refuses_when_the_workflow_file_is_gone_or_broken(hf: Hetflow, tmp_path: Path, spoil: object) -> None:
    text = f"""apiVersion: hetflow/v1
name: spoiled
steps:
  s:
    image: {BUSYBOX}
    command: [sh, -c, "exit 3"]
"""
    wf = Path(write(tmp_path, text))
    assert hf("run", str(wf), "-q", check=False).returncode == 1
    run_id = hf.last_run()
    before = hf.show(run_id)
    assert callable(spoil)
    spoil(wf)
    refused = hf("resume", run_id, "-q", check=False)
    assert refused.returncode == 2
    assert str(wf) in refused.stderr
    assert f"hetflow resume {run_id} --as-recorded" in refused.stderr
    assert "Traceback" not in refused.stderr
    after = hf.show(run_id)
    assert [(s["state"], s["attempts"]) for s in after["steps"]] == [("failed", 1)]
    assert after["state"] == before["state"]
    assert not (Path(after["workdir"]) / "workflow.v1.yaml").exists()
    # the way out the message names: the recorded copy, as it is
    again = hf("resume", run_id, "-q", "--as-recorded", check=False)
    assert again.returncode == 1
    assert _attempts(hf, run_id) == {"s": 2}
