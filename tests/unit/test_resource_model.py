"""The resource model's homes for what comes next: a GPU request as one value (fractions,
MIG, vendors) and a task's replica count (gangs), both at today's behaviour by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.plan.instance import Option, Task
from hetflow.spec import GpuRequest, Resources, load_workflow


@pytest.mark.parametrize(
    ("request_", "devices", "whole"),
    [
        pytest.param(GpuRequest(), 0, True, id="none"),
        pytest.param(GpuRequest(count=4), 4, True, id="whole-devices"),
        pytest.param(GpuRequest(share=0.25), 1, False, id="a-share-of-one-device"),
        pytest.param(GpuRequest(mig="1g.10gb"), 1, False, id="one-mig-instance"),
    ],
)
def test_gpu_request_devices(request_: GpuRequest, devices: int, whole: bool) -> None:
    assert request_.devices == devices
    assert request_.whole is whole


def test_resources_state_their_gpu_request_whole_nvidia_devices_today() -> None:
    assert Resources(gpus=2).gpu_request == GpuRequest(count=2, vendor="nvidia")
    assert Resources().gpu_request == GpuRequest(count=0)


def test_a_task_is_a_gang_of_one_by_default() -> None:
    task = Task("s", (Option("v", "c", 1.0, 1, 1),))
    assert task.replicas == 1


def test_a_loaded_step_asks_through_the_request(tmp_path: Path) -> None:
    f = tmp_path / "wf.yaml"
    f.write_text("apiVersion: hetflow/v1\nname: w\nsteps:\n  s:\n    image: img\n    resources: {gpus: 3}\n")
    step = load_workflow(f).workflow.steps["s"]
    (variant,) = step.resolved_variants().values()
    assert variant.resources.gpu_request.devices == 3
