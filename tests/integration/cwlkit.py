"""The CUDA+CPU CWL workflow of ``test_cwl_gpu`` as the cluster tests run it (Slurm, Kubernetes):
its images named in a hint (``hetflow run x.cwl`` has no --default-container), its CUDA job
writing what it was given (the GPU device nodes it sees, the visibility variables) instead of
insisting on /dev/nvidia0, which a cluster need not give."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.hfkit import BUSYBOX
from tests.integration.test_cwl_gpu import PREP, WORKFLOW

TRAIN = """\
cwlVersion: v1.2
class: CommandLineTool
$namespaces: {cwltool: "http://commonwl.org/cwltool#"}
requirements:
  cwltool:CUDARequirement: {cudaVersionMin: "11.4", cudaComputeCapability: "7.0"}
  ResourceRequirement: {coresMin: 1, ramMin: 512}
baseCommand:
  - sh
  - -c
  - "ls /dev | grep '^nvidia[0-9]' > model.txt; echo cuda=$CUDA_VISIBLE_DEVICES nv=$NVIDIA_VISIBLE_DEVICES >> model.txt;
    cat $0 >> model.txt"
inputs:
  data: {type: File, inputBinding: {position: 1}}
outputs:
  model: {type: File, outputBinding: {glob: model.txt}}
"""

HINT = f"class: Workflow\nhints:\n  DockerRequirement: {{dockerPull: {BUSYBOX}}}\n"


def write_workflow(folder: Path, n: int = 7, cc: str = "7.0") -> Path:
    """wf.cwl (prep, a CPU job; train, a CUDA job needing compute capability ``cc``), its
    tools and inputs.yml in ``folder``."""
    (folder / "prep.cwl").write_text(PREP)
    (folder / "train.cwl").write_text(TRAIN.replace('cudaComputeCapability: "7.0"', f'cudaComputeCapability: "{cc}"'))
    (folder / "wf.cwl").write_text(WORKFLOW.replace("class: Workflow\n", HINT))
    (folder / "inputs.yml").write_text(f"n: {n}\n")
    return folder / "wf.cwl"


def hetflow(folder: Path, env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``hetflow ARGS`` run in ``folder`` (where a CWL run puts its outputs)."""
    cmd = [sys.executable, "-m", "hetflow.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=folder)


def model_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines of the run's ``model`` output (the output object is on stdout)."""
    assert proc.returncode == 0, proc.stderr
    return Path(json.loads(proc.stdout)["model"]["path"]).read_text().splitlines()
