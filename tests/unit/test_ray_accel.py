"""Ray's translation of a step's accelerator request (pure: no Ray started): fractional
num_gpus for a share, Ray's accelerator_type for AMD/Intel models, a gpu_vendor: marker for
a vendor without a model, one mig-<profile> resource for a MIG instance; and the task's
container given AMD/Intel render nodes (fake paths; nothing opened)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.errors import EngineError, UsageError
from hetflow.execute.backends.ray import (
    RayNode,
    RaySettings,
    accelerator_type,
    task_request,
    with_gpus,
    with_vendor,
)
from hetflow.execute.backends.ray.container import held_mig
from hetflow.execute.backends.ray.translate import with_mig
from hetflow.execute.devices.migtable import MigInstance
from hetflow.spec import GpuRequest
from tests.unit.builders import gpu_job

NODES = (
    RayNode("n1", "nv", {"CPU": 4, "GPU": 1, "memory": 8e9, "accelerator_type:A100": 1, "mig-1g.10gb": 7}),
    RayNode(
        "n2",
        "amd",
        {"CPU": 4, "GPU": 2, "memory": 8e9, "accelerator_type:AMD-Instinct-MI250X": 1, "gpu_vendor:amd": 1},
    ),
)


def test_product_names_become_rays_accelerator_types() -> None:
    assert accelerator_type("AMD Instinct MI250X") == "AMD-Instinct-MI250X"
    assert accelerator_type("Intel Data Center GPU Max 1550") == "Intel-GPU-Max-1550"
    assert accelerator_type("NVIDIA A100-SXM4-40GB") == "A100"


@pytest.mark.parametrize(
    ("req", "model", "gpus", "resources"),
    [
        (GpuRequest(share=0.25), "NVIDIA A100-SXM4-40GB", 0.25, {"accelerator_type:A100": 0.001}),
        (GpuRequest(share=0.5, vendor="any"), None, 0.5, {}),
        (GpuRequest(count=1, vendor="amd"), "AMD Instinct MI250X", 1, {"accelerator_type:AMD-Instinct-MI250X": 0.001}),
        (GpuRequest(count=2, vendor="amd"), None, 2, {"gpu_vendor:amd": 0.001}),
        (GpuRequest(count=1, vendor="any"), None, 1, {}),
        (GpuRequest(mig="1g.10gb"), None, 0, {"mig-1g.10gb": 1.0}),
    ],
)
def test_requests_become_num_gpus_and_resources(
    req: GpuRequest, model: str | None, gpus: float, resources: dict[str, float]
) -> None:
    r = task_request(gpu_job(req, model), NODES)
    assert (r.num_gpus, dict(r.resources)) == (gpus, resources)


def test_what_no_node_offers_is_refused_with_the_fix() -> None:
    with pytest.raises(EngineError, match=r"MIG 3g.40gb instance \(mig-3g.40gb\); no Ray node offers it.*ray start"):
        task_request(gpu_job(GpuRequest(mig="3g.40gb")), NODES)
    with pytest.raises(EngineError, match=r"no Ray node declares gpu_vendor:intel.*--resources"):
        task_request(gpu_job(GpuRequest(count=1, vendor="intel")), NODES)
    with pytest.raises(EngineError, match="more than any Ray node has"):
        task_request(gpu_job(GpuRequest(count=3, vendor="amd")), NODES)


def test_an_amd_or_intel_task_gets_its_render_nodes() -> None:
    job = gpu_job(GpuRequest(count=1, vendor="amd"), "AMD Instinct MI250X")
    spec = with_vendor(job)
    assert spec.env["HETFLOW_GPU_VENDOR"] == "amd"
    out = with_gpus(spec, [1], "/nonexistent-devs")
    assert out.devices == (("/nonexistent-devs/dri/renderD129", "/dev/dri/renderD129"),)
    assert (out.env["ROCR_VISIBLE_DEVICES"], out.env["HIP_VISIBLE_DEVICES"]) == ("0", "0")
    assert "CUDA_VISIBLE_DEVICES" not in out.env
    intel = with_gpus(with_vendor(replace(job, gpu_request=GpuRequest(count=2, vendor="intel"))), [0, 1], "/d")
    assert intel.env["ZE_AFFINITY_MASK"] == "0,1" and len(intel.devices) == 2
    assert "HETFLOW_GPU_VENDOR" not in out.env  # the task's marker stays out of the container
    # a share is told its share, as on this machine (execute/devices/gpu.py)
    assert with_vendor(gpu_job(GpuRequest(share=0.5))).env == {
        "HETFLOW_GPU_SHARE": "0.5",
        "HETFLOW_GPU_SHARING": "time-slicing",
    }


def test_a_mig_task_holds_one_free_instance_and_its_container_sees_only_it(tmp_path: Path) -> None:
    a = MigInstance("MIG-a", "1g.10gb", ("/d/nvidia0", "/d/nvidia-caps/nvidia-cap21", "/d/nvidia-caps/nvidia-cap22"))
    b = MigInstance("MIG-b", "1g.10gb", ("/d/nvidia0", "/d/nvidia-caps/nvidia-cap30", "/d/nvidia-caps/nvidia-cap31"))
    other = MigInstance("MIG-c", "3g.40gb", ("/d/nvidia1", "/d/nvidia-caps/nvidia-cap40"))
    with held_mig("n1", "1g.10gb", (other, a, b)) as first, held_mig("n1", "1g.10gb", (other, a, b)) as second:
        assert (first, second) == (a, b)  # a held instance is skipped
        with held_mig("n1", "1g.10gb", (a, b)) as third:
            assert third is None  # every one held: the task says so (step_task's message)
    with held_mig("n1", "1g.10gb", (a, b)) as again:
        assert again == a  # released with the container
    spec = with_vendor(gpu_job(GpuRequest(mig="1g.10gb")))
    assert spec.env["HETFLOW_MIG_PROFILE"] == "1g.10gb"
    out = with_mig(spec, b, str(tmp_path))
    assert out.devices == (
        ("/d/nvidia0", "/dev/nvidia0"),
        ("/d/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap30"),
        ("/d/nvidia-caps/nvidia-cap31", "/dev/nvidia-caps/nvidia-cap31"),
    )
    assert out.env["NVIDIA_VISIBLE_DEVICES"] == out.env["CUDA_VISIBLE_DEVICES"] == "MIG-b"
    assert "HETFLOW_MIG_PROFILE" not in out.env


def test_the_mig_table_is_read_from_the_ray_section_and_a_bad_one_is_named() -> None:
    raw = {"n": [{"uuid": "MIG-a", "gpu_uuid": "GPU-0", "profile": "1g.10gb", "files": ["/d/nvidia0", "/d/c21"]}]}
    (mig,) = RaySettings.from_mapping({"mig_devices": raw}).mig_devices["n"]
    assert (mig.uuid, mig.gpu_uuid, mig.files, mig.index) == ("MIG-a", "GPU-0", ("/d/nvidia0", "/d/c21"), 0)
    with pytest.raises(UsageError, match=r"ray.mig_devices.n\[0\] is .*profile: 1g.10gb"):
        RaySettings.from_mapping({"mig_devices": {"n": [{"uuid": "MIG-a"}]}})
    with pytest.raises(UsageError, match=r"ray\.mig_devices must map node names"):
        RaySettings.from_mapping({"mig_devices": "[1, 2]"})
