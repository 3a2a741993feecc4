"""`hetflow run` follows the planner: its variant per step (not "GPU whenever free") and its
order of dispatch.  GPUs are FAKE (mknod'd device nodes): this proves the choices, not CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, write


def _two_variants(gpu_estimate: str, cpu_estimate: str) -> str:
    return f"""
apiVersion: hetflow/v1
name: choose
steps:
  x:
    outputs: [dev.txt]
    variants:
      gpu:
        image: {BUSYBOX}
        command: [sh, -c, "ls /dev > /out/dev.txt"]
        resources: {{gpus: 1}}
        estimate: {gpu_estimate}
      cpu:
        image: {BUSYBOX}
        command: [sh, -c, "ls /dev > /out/dev.txt"]
        estimate: {cpu_estimate}
"""


@pytest.mark.parametrize(
    ("gpu_estimate", "cpu_estimate", "planner", "variant"),
    [
        ("10s", "100s", "plan", "gpu"),
        ("100s", "10s", "plan", "cpu"),  # a free GPU, but the plan says the CPU variant is faster
        ("100s", "10s", "greedy", "gpu"),  # the plain rule takes the free GPU anyway
    ],
    ids=["plan-picks-gpu", "plan-picks-cpu-over-free-gpu", "greedy-takes-free-gpu"],
)
def test_runner_follows_the_plans_variant(
    hf: Hetflow, tmp_path: Path, gpu_estimate: str, cpu_estimate: str, planner: str, variant: str
) -> None:
    env = {"HETFLOW_FAKE_GPUS": "a100:1", "HETFLOW_PLANNER": planner}
    hf("run", "-q", write(tmp_path, _two_variants(gpu_estimate, cpu_estimate)), extra_env=env)
    step = hf.show(hf.last_run())["steps"][0]
    assert step["variant"] == variant
    assert step["gpus"] == ([0] if variant == "gpu" else [])
    if planner == "plan":
        assert f"{variant}: planned" in step["reason"]


def test_runner_dispatches_in_the_plans_order(hf: Hetflow, tmp_path: Path) -> None:
    # Both `short` and `long` are ready at once and each takes the whole machine; the file
    # lists `short` first, but `long` heads the critical path, so the plan starts it first.
    wf = f"""
apiVersion: hetflow/v1
name: order
steps:
  short:
    image: {BUSYBOX}
    command: ["true"]
    resources: {{cpus: 2}}
    estimate: 1s
  long:
    image: {BUSYBOX}
    command: ["true"]
    resources: {{cpus: 2}}
    estimate: 50s
  after:
    needs: [long]
    image: {BUSYBOX}
    command: ["true"]
    resources: {{cpus: 2}}
    estimate: 50s
"""
    hf("run", "-q", write(tmp_path, wf))
    steps = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}
    assert steps["long"]["started"] < steps["short"]["started"]
    hf("run", "-q", write(tmp_path, wf), extra_env={"HETFLOW_PLANNER": "greedy"})
    steps = {s["step"]: s for s in hf.show(hf.last_run())["steps"]}
    assert steps["short"]["started"] < steps["long"]["started"]
