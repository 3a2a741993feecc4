"""hetflow-cwl-runner on real podman: a scatter, a conditional step and an ExpressionTool, each
CommandLineTool job in hetflow's hardened container (the tiny busybox image as the default)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

TOOL = """\
cwlVersion: v1.2
class: CommandLineTool
baseCommand: [sh, -c]
arguments: ["echo item $0; grep CapEff /proc/self/status", $(inputs.n)]
inputs:
  n: int
stdout: out.txt
outputs:
  out: {type: File, outputBinding: {glob: out.txt, loadContents: true}}
"""

WORKFLOW = """\
cwlVersion: v1.2
class: Workflow
requirements:
  ScatterFeatureRequirement: {}
  InlineJavascriptRequirement: {}
inputs:
  ns: "int[]"
  run_extra: boolean
outputs:
  outs: {type: "File[]", outputSource: each/out}
  extra: {type: File?, outputSource: maybe/out}
  total: {type: int, outputSource: count/total}
steps:
  each:
    run: tool.cwl
    scatter: n
    in: {n: ns}
    out: [out]
  maybe:
    run: tool.cwl
    when: $(inputs.go)
    in: {n: {default: 99}, go: run_extra}
    out: [out]
  count:
    run:
      class: ExpressionTool
      inputs: {files: "File[]"}
      outputs: {total: int}
      expression: "$({total: inputs.files.length})"
    in: {files: each/out}
    out: [total]
"""


def _run(tmp_path: Path, image: str, job: dict[str, object]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tool.cwl").write_text(TOOL)
    (tmp_path / "wf.cwl").write_text(WORKFLOW)
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "hetflow.cwl", "--quiet", "--default-container", image]
    cmd += ["--outdir", str(tmp_path / "out"), str(tmp_path / "wf.cwl"), str(tmp_path / "job.json")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240, check=False)


def test_scatter_conditional_and_expression_in_hardened_containers(tmp_path: Path, busybox: str) -> None:
    proc = _run(tmp_path, busybox, {"ns": [1, 2, 3], "run_extra": False})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["total"] == 3
    assert out["extra"] is None  # `when` was false: the step did not run
    texts = [Path(f["path"]).read_text() for f in out["outs"]]
    assert [t.splitlines()[0] for t in texts] == ["item 1", "item 2", "item 3"]
    # hetflow's container: every capability dropped; as root, CHOWN, DAC_OVERRIDE and FOWNER
    # given back (bits 0, 1 and 3: docs/guides/cwl.md)
    caps = "000000000000000b" if os.getuid() == 0 else "0000000000000000"
    assert [t.splitlines()[1].split() for t in texts] == [["CapEff:", caps]] * 3


def test_a_failing_job_fails_the_run_with_exit_1(tmp_path: Path, busybox: str) -> None:
    (tmp_path / "tool.cwl").write_text(TOOL.replace("echo item", "exit 3; echo"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "hetflow.cwl", "--quiet", "--default-container", busybox]
    (tmp_path / "one.json").write_text('{"n": 1}')
    cmd += ["--outdir", str(tmp_path / "out2"), str(tmp_path / "tool.cwl"), str(tmp_path / "one.json")]
    failed = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert failed.returncode == 1
    assert "exited with status: 3" in failed.stderr


BATCH_TOOL = """\
cwlVersion: v1.2
class: CommandLineTool
baseCommand: [sh, -c]
arguments:
  - "test -e /tmp/mark && echo dirty; touch /tmp/mark; echo item $0 in `pwd`; echo said $0 >&2; [ $0 -ne 4 ] || exit 3"
  - $(inputs.n)
inputs:
  n: int
stdout: out.txt
outputs:
  out: {type: File, outputBinding: {glob: out.txt, loadContents: true}}
"""


def _batched(tmp_path: Path, busybox: str, ns: list[int], size: int) -> subprocess.CompletedProcess[str]:
    (tmp_path / "tool.cwl").write_text(BATCH_TOOL)
    (tmp_path / "wf.cwl").write_text(WORKFLOW)
    (tmp_path / "job.json").write_text(json.dumps({"ns": ns, "run_extra": False}))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "HETFLOW_HOME": str(tmp_path / "home")}
    # a full batch goes at once: the long linger only keeps a slow machine from splitting it
    cmd = [sys.executable, "-m", "hetflow.cwl", "--quiet", "--default-container", busybox, "--hetflow-no-cache"]
    cmd += ["--hetflow-batch", str(size), "--hetflow-batch-linger", "600"]
    cmd += ["--outdir", str(tmp_path / "out"), str(tmp_path / "wf.cwl"), str(tmp_path / "job.json")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240, check=False)


def _containers(home: Path) -> dict[str, str]:
    with sqlite3.connect(home / "state.db") as db:
        return dict(db.execute("SELECT step, container FROM attempts WHERE step LIKE 'each%'").fetchall())


def test_batched_jobs_share_a_container_each_with_its_own_outdir_tmp_output_and_exit_code(
    tmp_path: Path, busybox: str
) -> None:
    proc = _batched(tmp_path, busybox, [1, 2, 3], size=3)
    assert proc.returncode == 0, proc.stderr
    texts = [Path(f["path"]).read_text() for f in json.loads(proc.stdout)["outs"]]
    # each job saw /tmp empty and ran in an output directory of its own
    lines = [t.splitlines() for t in texts]
    assert [ln[0].split()[:2] for ln in lines] == [["item", "1"], ["item", "2"], ["item", "3"]]
    assert len({ln[0].split()[-1] for ln in lines}) == 3 and not any("dirty" in t for t in texts)
    assert all(f"said {n}" in proc.stderr for n in (1, 2, 3))  # what a job did not redirect is shown
    containers = _containers(tmp_path / "home")
    assert len(containers) == 3 and len(set(containers.values())) == 1, containers
    with sqlite3.connect(tmp_path / "home" / "state.db") as db:  # the image as the tool named it, not its ID
        assert {r[0] for r in db.execute("SELECT image FROM attempts WHERE step LIKE 'each%'")} == {busybox}


def test_a_failing_job_in_a_batch_fails_alone_with_its_exit_code(tmp_path: Path, busybox: str) -> None:
    proc = _batched(tmp_path, busybox, [3, 4], size=2)
    assert proc.returncode == 1
    assert "exited with status: 3" in proc.stderr
    with sqlite3.connect(tmp_path / "home" / "state.db") as db:
        codes = dict(db.execute("SELECT step, exit_code FROM attempts WHERE step LIKE 'each%'").fetchall())
    assert sorted(codes.values()) == [0, 3], codes
