"""GPU checkpoints known possible or refused before a run starts: the node's answer
(``checkpoint.gpus.gpu_checkpoint_support``, what ``hetflow nodes`` prints) from a fake NVML and
the fake libcuda of fakecuda.c, and each GPU step's refusal in the pre-flight checks
(``submit.record.checkpoint_problems``) with its reason and the alternative (``mode: app``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from hetflow.errors import SpecError
from hetflow.execute.checkpoint.gpus import gpu_checkpoint_support
from hetflow.execute.submit.record import checkpoint_problems, cluster_checkpoint_problems
from hetflow.inventory import Node, discover
from hetflow.inventory.fakes.nvml import FakeNvml, FakeNvmlDevice
from hetflow.report import render_node
from hetflow.spec import parse_workflow
from tests.unit.fakecuda import HAVE_CC, build_fake_libcuda

pytestmark = [
    pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler for the fake libcuda"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the CRIU probe says 'needs root' before it runs criu"),
]
H100 = "NVIDIA H100 80GB HBM3"


def node(tmp: Path, driver: str = "580.159.04", env: dict[str, str] | None = None) -> Node:
    nvml = FakeNvml(devices=[FakeNvmlDevice(name=H100, compute_capability=(9, 0))], driver_version=driver)
    return discover(tmp / "home", env or {}, nvml=nvml, dev_root=tmp)


@pytest.fixture
def driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working CRIU (a fake that passes ``criu check``) and the fake driver with the checkpoint API."""
    criu = tmp_path / "criu"
    criu.write_text('#!/bin/sh\ncase "$1" in --version) echo "Version: 4.1.1";; esac\nexit 0\n')
    criu.chmod(0o755)
    monkeypatch.setenv("HETFLOW_CRIU", str(criu))
    lib = build_fake_libcuda(tmp_path)
    monkeypatch.setenv("HETFLOW_LIBCUDA", str(lib))
    return lib


def test_nodes_says_gpu_checkpoints_work_with_the_driver_api(tmp_path: Path, driver: Path) -> None:
    n = node(tmp_path)
    said = gpu_checkpoint_support(n).describe()
    assert said == "yes (driver 580.159.04, CUDA checkpoint API)"
    console = Console(width=200, record=True)
    console.print(render_node(n.model_copy(update={"gpu_checkpoints": said})))
    assert re.search(r"GPU checkpoints:\s+yes \(driver 580\.159\.04, CUDA checkpoint API\)", console.export_text())


def test_nodes_says_why_not(tmp_path: Path, driver: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpu_checkpoint_support(node(tmp_path, "550.54.15")).describe() == (
        "no: driver 550.54.15 has no CUDA checkpoint API (it came with driver 570)"
    )
    fake = discover(tmp_path / "home", {"HETFLOW_FAKE_GPUS": "h100:1"}, nvml=FakeNvml(), dev_root=tmp_path)
    assert "the GPUs are fake (HETFLOW_FAKE_GPUS)" in gpu_checkpoint_support(fake).reason
    monkeypatch.setenv("HETFLOW_LIBCUDA", str(build_fake_libcuda(tmp_path, "-DNO_CHECKPOINT_API")))
    assert "has no checkpoint API (cuCheckpointProcessGetState)" in gpu_checkpoint_support(node(tmp_path)).reason
    monkeypatch.setenv("HETFLOW_LIBCUDA", str(tmp_path / "absent.so"))
    assert "the CUDA driver library cannot be loaded" in gpu_checkpoint_support(node(tmp_path)).reason


def wf(resources: str, extra: str = "") -> str:
    return (
        "apiVersion: hetflow/v1\nname: g\nsteps:\n  cpu:\n    image: b\n    command: [x]\n    checkpoint: true\n"
        f"  train:\n    image: b\n    command: [x]\n    resources: {{{resources}}}\n{extra}"
        "    checkpoint: {every: 5s}\n"
    )


@pytest.mark.parametrize(
    ("resources", "sharing", "driver_version", "said"),
    [
        ("gpus: 1", "", "580.159.04", ""),
        ("gpu_share: 0.5", "time-slicing:2", "580.159.04", ""),
        ("gpus: 1", "", "550.54.15", "GPU checkpoints do not work here: driver 550.54.15 has no CUDA checkpoint API"),
        ("gpu_mig: 1g.10gb", "", "580.159.04", "it runs on a MIG instance (1g.10gb)"),
        ("gpu_share: 0.5", "mps:2", "580.159.04", "it is an MPS client"),
    ],
    ids=["whole-gpu", "time-sliced", "driver-too-old", "mig", "mps-client"],
)
def test_a_gpu_step_with_checkpoint_is_accepted_or_refused_before_the_run(
    tmp_path: Path, driver: Path, resources: str, sharing: str, driver_version: str, said: str
) -> None:
    loaded = parse_workflow(wf(resources), "wf.yaml")
    n = node(tmp_path, driver_version, {"HETFLOW_GPU_SHARING": sharing} if sharing else {})
    problems = checkpoint_problems(loaded, "podman", n)
    if not said:
        assert problems == []
        return
    (p,) = problems
    assert p.line == 12 and p.message.startswith("step 'train': ") and said in p.message
    assert "write checkpoint: {mode: app}" in p.message


def test_a_gang_with_checkpoint_is_refused_use_mode_app() -> None:
    text = wf("gpus: 1", "    gang: {replicas: 2, launcher: torch}\n")
    with pytest.raises(SpecError, match=r"a gang's replicas talk to each other; write checkpoint: \{mode: app\}"):
        parse_workflow(text, "wf.yaml")


def test_a_gpu_step_with_checkpoint_on_a_cluster_backend_is_refused() -> None:
    loaded = parse_workflow(wf("gpus: 1"), "wf.yaml")
    (p,) = cluster_checkpoint_problems(loaded, "slurm")
    assert p.line == 12 and "GPU checkpoints are taken by the local backend only, not by slurm" in p.message
    app = parse_workflow(wf("gpus: 1").replace("{every: 5s}", "{mode: app}"), "wf.yaml")
    assert cluster_checkpoint_problems(app, "slurm") == []
