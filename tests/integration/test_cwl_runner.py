"""hetflow-cwl-runner on real podman: a scatter, a conditional step and an ExpressionTool, each
CommandLineTool job in hetflow's hardened container (the tiny busybox image as the default)."""

from __future__ import annotations

import json
import os
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
