"""A CWL workflow with a CPU step and a CUDA step (cwltool:CUDARequirement) on fake GPUs
(device nodes made with mknod: placement and isolation, not GPU computation): planned with the
GPU job on a GPU node class and the CPU job off it, run with the fake GPU given to the CUDA
job's container only, recorded in the store, and taken from the cache on a rerun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

PREP = """\
cwlVersion: v1.2
class: CommandLineTool
requirements:
  ResourceRequirement: {coresMin: 1, ramMin: 512}
baseCommand: [sh, -c, "ls /dev | grep -c nvidia > data.txt; echo prepared $0 >> data.txt"]
inputs:
  n: {type: int, inputBinding: {position: 1}}
outputs:
  data: {type: File, outputBinding: {glob: data.txt}}
"""

TRAIN = """\
cwlVersion: v1.2
class: CommandLineTool
$namespaces: {cwltool: "http://commonwl.org/cwltool#"}
requirements:
  cwltool:CUDARequirement: {cudaVersionMin: "11.4", cudaComputeCapability: "7.0"}
  ResourceRequirement: {coresMin: 1, ramMin: 512}
baseCommand: [sh, -c, "ls /dev/nvidia0 > model.txt; cat $0 >> model.txt"]
inputs:
  data: {type: File, inputBinding: {position: 1}}
outputs:
  model: {type: File, outputBinding: {glob: model.txt}}
"""

WORKFLOW = """\
cwlVersion: v1.2
class: Workflow
inputs:
  n: int
outputs:
  model: {type: File, outputSource: train/model}
steps:
  prep: {run: prep.cwl, in: {n: n}, out: [data]}
  train: {run: train.cwl, in: {data: prep/data}, out: [model]}
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HETFLOW_")}
    env.update(PYTHONPATH=f"{ROOT / 'src'}:{ROOT}", HETFLOW_HOME=str(tmp_path / "home"), HETFLOW_FAKE_GPUS="a100:1")
    return env


def _hetflow(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "hetflow.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240, check=False)


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    (tmp_path / "prep.cwl").write_text(PREP)
    (tmp_path / "train.cwl").write_text(TRAIN)
    (tmp_path / "wf.cwl").write_text(WORKFLOW)
    (tmp_path / "inputs.yml").write_text("n: 7\n")
    return tmp_path / "wf.cwl"


def test_plan_puts_the_cuda_job_on_a_gpu_class_and_says_why(workflow: Path, tmp_path: Path) -> None:
    cluster = ROOT / "examples" / "clusters" / "hetero-16.yaml"
    proc = _hetflow(_env(tmp_path), "plan", str(workflow), "--cluster", str(cluster), "--json", "--explain")
    assert proc.returncode == 0, proc.stderr
    placed = {p["step"]: p for p in json.loads(proc.stdout)["steps"]}
    assert placed["train"]["node_class"].startswith("gpu.")
    assert placed["prep"]["node_class"].startswith("cpu.")
    proc = _hetflow(_env(tmp_path), "plan", str(workflow), "--cluster", str(cluster), "--explain")
    assert "rejected default on cpu.std: asks for 1 GPU; cpu.std has none" in proc.stdout


def test_the_cuda_job_gets_the_gpu_is_recorded_and_cached(workflow: Path, tmp_path: Path, busybox: str) -> None:
    env = _env(tmp_path)
    first = subprocess.run(
        [sys.executable, "-m", "hetflow.cwl", "--quiet", "--default-container", busybox, "--outdir", "out1",
         str(workflow), str(tmp_path / "inputs.yml")],
        capture_output=True, text=True, env=env, timeout=240, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    model = Path(json.loads(first.stdout)["model"]["path"]).read_text().splitlines()
    assert model == ["/dev/nvidia0", "0", "prepared 7"]  # the CPU job saw no GPU, the CUDA job its one
    runs = json.loads(_hetflow(env, "ps", "--all", "--json").stdout)
    run_id = runs[0]["id"]
    shown = json.loads(_hetflow(env, "show", run_id, "--json").stdout)
    steps = {s["step"]: s for s in shown["steps"]}
    assert steps["train"]["state"] == "succeeded" and steps["train"]["gpus"] == [0]
    assert steps["prep"]["gpus"] == []
    second = subprocess.run(
        [sys.executable, "-m", "hetflow.cwl", "--default-container", busybox, "--outdir", "out2",
         str(workflow), str(tmp_path / "inputs.yml")],
        capture_output=True, text=True, env=env, timeout=240, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert second.stderr.count("cached: its result from run " + run_id) == 2
    assert Path(json.loads(second.stdout)["model"]["path"]).read_text().splitlines() == model
