"""The two examples through `hetflow run`, in the real example image (CPU variants: this
machine has no GPU; the CuPy image is built by `make demo`, not needed here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from demo.images import build_examples

from tests.integration.hfkit import Hetflow, step_out

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def example_images() -> list[str]:
    # Built once per machine and cached (about 75 s the first time); a failure here fails.
    return build_examples(EXAMPLES, gpu=False, log=lambda _: None)


def test_meanpool_runs_cpu_variant_and_says_why(hf: Hetflow, example_images: list[str]) -> None:
    proc = hf("run", str(EXAMPLES / "meanpool" / "workflow.yaml"), "-p", "size=256", "-p", "iterations=4")
    assert "variant 'gpu' asks for 1 GPU; this machine has none" in proc.stderr
    run_id = hf.last_run()
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert steps["pool"]["variant"] == "cpu"
    assert "gpu rejected: asks for 1 GPU" in steps["pool"]["reason"] and "has none" in steps["pool"]["reason"]
    matrix = np.load(step_out(hf, run_id, "generate") / "matrix.npy")
    pooled = np.load(step_out(hf, run_id, "pool") / "pooled.npy")
    assert matrix.shape == (256, 256) and pooled.shape == matrix.shape
    # a window mean preserves the mean of a wrap-around matrix
    assert float(pooled.mean()) == pytest.approx(float(matrix.mean()), rel=1e-4)


def test_circuit_runs_end_to_end_and_skips_the_gpu_only_step(hf: Hetflow, example_images: list[str]) -> None:
    proc = hf("run", str(EXAMPLES / "circuit" / "workflow.yaml"), "-p", "gates=2000", "-p", "vectors=4096", timeout=300)
    assert proc.returncode == 0
    run_id = hf.last_run()
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert steps["litho"]["state"] == "skipped"
    assert "asks for 1 GPU; this machine has none" in steps["litho"]["reason"]
    assert all(s["state"] == "succeeded" for n, s in steps.items() if n != "litho")
    assert {steps["place"]["variant"], steps["simulate"]["variant"]} == {"cpu"}
    report = json.loads((step_out(hf, run_id, "signoff") / "report.json").read_text())
    assert report["status"] == "PASS", report
