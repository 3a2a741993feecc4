"""What a container is given per GPU vendor and sharing mode (``execute.devices.gpu.gpu_access``):
device nodes, variables, mounts and groups.  The GPUs are FAKE ``Gpu`` values built by
hand; the DRM-group test mknods nothing: it reads the mode and group of plain files."""

from __future__ import annotations

import os
from pathlib import Path

from hetflow.execute import gpu_access, run_args
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.launch.container import build_spec
from hetflow.inventory import Gpu, GpuSharing, MigDevice, Node
from hetflow.plan import Slot
from tests.unit.builders import GIB, cpu, gpu, load_steps

NV_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/kfd")  # a host with both vendors' drivers


def host(gpus: tuple[Gpu, ...], sharing: GpuSharing | None = None) -> Node:
    return Node(
        name="h",
        cpu=cpu(8),
        memory_bytes=32 * GIB,
        gpus=gpus,
        gpu_source="fake",
        control_devices=NV_CONTROL,
        gpu_sharing=sharing or GpuSharing(),
    )


def amd(index: int, render: int) -> Gpu:
    return gpu(index).model_copy(
        update={
            "vendor": "amd",
            "model": "AMD Instinct MI250X",
            "uuid": f"GPU-amd-{index}",
            "render_path": f"/dev/dri/renderD{render}",
            "card_path": f"/dev/dri/card{render - 127}",
        }
    )


def intel(index: int, render: int) -> Gpu:
    return amd(index, render).model_copy(update={"vendor": "intel", "model": "Intel Data Center GPU Max 1550"})


def inside(access_devices: tuple[tuple[str, str], ...]) -> list[str]:
    return [c for _, c in access_devices]


def test_amd_gets_kfd_and_only_its_dri_nodes_and_no_nvidia_node() -> None:
    g1 = amd(1, 129)
    access = gpu_access((g1,), host((amd(0, 128), g1)))
    assert inside(access.devices) == ["/dev/kfd", "/dev/dri/renderD129", "/dev/dri/card2"]
    assert access.env["ROCR_VISIBLE_DEVICES"] == "0" and access.env["HIP_VISIBLE_DEVICES"] == "0"
    assert access.env["NVIDIA_VISIBLE_DEVICES"] == "void" and "CUDA_VISIBLE_DEVICES" not in access.env
    assert access.env["HETFLOW_GPU_UUIDS"] == "GPU-amd-1"


def test_two_amd_gpus_are_numbered_0_and_1_inside() -> None:
    gs = (amd(0, 128), amd(1, 129))
    access = gpu_access(gs, host(gs))
    assert access.env["ROCR_VISIBLE_DEVICES"] == "0,1"
    assert sorted(inside(access.devices)) == sorted(
        ["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/card1", "/dev/dri/renderD129", "/dev/dri/card2"]
    )


def test_intel_gets_only_its_dri_nodes_and_ze_affinity_mask() -> None:
    g = intel(0, 130)
    access = gpu_access((g,), host((g,)))
    assert inside(access.devices) == ["/dev/dri/renderD130", "/dev/dri/card3"]
    assert access.env["ZE_AFFINITY_MASK"] == "0" and access.env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_fake_dri_nodes_under_hetflow_home_map_to_dev_dri() -> None:
    g = amd(0, 128).model_copy(update={"render_path": "/home/hf/dev/dri/renderD128", "card_path": ""})
    access = gpu_access((g,), host((g,)))
    assert access.devices == (("/dev/kfd", "/dev/kfd"), ("/home/hf/dev/dri/renderD128", "/dev/dri/renderD128"))


def test_time_slicing_share_is_one_device_with_its_share() -> None:
    g0, g1 = gpu(0), gpu(1)
    n = host((g0, g1), GpuSharing(mode="time-slicing", replicas=4))
    access = gpu_access((g1,), n, slot=Slot(g1, "time-slicing", 0.25))
    assert inside(access.devices) == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]  # never /dev/kfd
    assert access.env["CUDA_VISIBLE_DEVICES"] == "0" and access.env["NVIDIA_VISIBLE_DEVICES"] == "0"
    assert access.env["HETFLOW_GPU_SHARE"] == "0.25" and access.env["HETFLOW_GPU_SHARING"] == "time-slicing"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in access.env


def test_mps_client_gets_thread_percentage_pinned_memory_and_pipe(tmp_path: Path) -> None:
    g = gpu(0)  # 40 GiB
    pipe = tmp_path / "mps"
    pipe.mkdir()
    n = host((g,), GpuSharing(mode="mps", replicas=4))
    access = gpu_access((g,), n, slot=Slot(g, "mps", 0.25), pipe=str(pipe))
    assert access.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert access.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10240M"  # a quarter of 40 GiB
    assert access.env["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    assert access.env["CUDA_VISIBLE_DEVICES"] == g.uuid
    assert [(m.source, m.target, m.read_only) for m in access.mounts] == [(str(pipe), str(pipe), False)]


def test_mps_memory_limit_from_the_policy_or_the_step(tmp_path: Path) -> None:
    g = gpu(0)
    n = host((g,), GpuSharing(mode="mps", replicas=4, mps_memory_limit=6 * GIB))
    absent = str(tmp_path / "none")
    policy = gpu_access((g,), n, slot=Slot(g, "mps", 0.5), pipe=absent)
    assert policy.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=6144M"
    assert policy.mounts == ()  # no pipe directory on the host: nothing to bind
    step = gpu_access((g,), n, slot=Slot(g, "mps", 0.5), memory=2 * GIB, pipe=absent)
    assert step.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
    assert step.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"


def test_mig_instance_gets_parent_node_control_and_only_its_caps() -> None:
    caps = [("/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"), ("/dev/nvidia-caps/nvidia-cap30",)]
    migs = tuple(
        MigDevice(index=i, uuid=f"MIG-aaaa-{i}", profile="3g.40gb", slices=3, memory_bytes=40 * GIB, cap_paths=c)
        for i, c in enumerate(caps)
    )
    g = gpu(0).model_copy(update={"mig": migs, "mig_enabled": True})
    access = gpu_access((g,), host((g,)), slot=Slot(g, "mig", 0.0, migs[0]))
    assert inside(access.devices) == [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    assert access.env["NVIDIA_VISIBLE_DEVICES"] == "MIG-aaaa-0" == access.env["CUDA_VISIBLE_DEVICES"]


def test_mig_instance_by_cdi_name_when_a_spec_lists_it(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text("kind: nvidia.com/gpu\ndevices:\n  - name: '0:1'\n  - name: '0'\n")
    mig = MigDevice(index=1, uuid="MIG-bbbb", profile="1g.10gb", slices=1, memory_bytes=10 * GIB)
    g = gpu(0, fake=False).model_copy(update={"mig": (mig,), "mig_enabled": True})
    access = gpu_access((g,), host((g,)), slot=Slot(g, "mig", 0.0, mig), cdi_dirs=[tmp_path], ldconfig="")
    assert access.cdi_devices == ("nvidia.com/gpu=0:1",) and access.devices == ()


def test_mixed_vendors_of_an_any_step_merge() -> None:
    gs = (gpu(0), amd(1, 129))
    access = gpu_access(gs, host(gs))
    assert access.env["NVIDIA_VISIBLE_DEVICES"] == "0" and access.env["ROCR_VISIBLE_DEVICES"] == "0"
    assert "/dev/kfd" in inside(access.devices) and "/dev/nvidia0" in inside(access.devices)


def test_dri_node_groups_become_group_add(tmp_path: Path) -> None:
    render = tmp_path / "renderD128"
    render.write_text("")
    os.chown(render, 0, 4321)
    render.chmod(0o660)
    g = amd(0, 128).model_copy(update={"render_path": str(render), "card_path": ""})
    access = gpu_access((g,), host((g,)))
    assert access.groups == ("4321",)
    step = load_steps("x:\n  image: x\n  resources: {gpus: 1, gpu_vendor: amd}\n").workflow.steps["x"]
    spec = build_spec(
        run_id="r",
        step_name="x",
        step=step,
        variant=step.resolved_variants()["default"],
        attempt=1,
        uid=1000,
        gid=100,
        paths=RunPaths(tmp_path),
        access=access,
    )
    args = run_args(spec)
    assert args[args.index("--group-add") + 1] == "4321"
    render.chmod(0o666)  # world-accessible: no group needed
    assert gpu_access((g,), host((g,))).groups == ()
