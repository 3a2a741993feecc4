"""FAKE GPUs of every vendor from HETFLOW_FAKE_GPUS: MIG layouts, AMD and Intel DRM nodes,
kfd and nvidia-caps nodes (real character devices made with mknod, no driver behind
them), and HETFLOW_GPU_SHARING."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hetflow.errors import InventoryError
from hetflow.inventory import GpuSharing, discover, make_fake_gpus
from hetflow.inventory.fakes.devnodes import DRM_MAJOR, KFD_MAJOR, NVIDIA_CAPS_MAJOR
from hetflow.inventory.fakes.gpus import parse_fake_entries
from hetflow.inventory.gpus.nvmlmig import mig_cap_minors
from hetflow.inventory.sharing import parse_gpu_sharing

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="fake GPUs mknod device nodes")
MIXED = "h100:1:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb,mi250x:2,max1550:1"


def rdev(path: str) -> tuple[int, int]:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode), f"{path} is not a character device"
    return os.major(st.st_rdev), os.minor(st.st_rdev)


@needs_root
def test_mixed_fake_node_indexes_run_across_vendors(tmp_path: Path) -> None:
    gpus, control = make_fake_gpus(MIXED, tmp_path)
    assert [(g.index, g.vendor) for g in gpus] == [(0, "nvidia"), (1, "amd"), (2, "amd"), (3, "intel")]
    assert [g.architecture for g in gpus] == ["", "gfx90a", "gfx90a", "pvc"]
    assert [g.device_id for g in gpus] == ["0x2330", "0x740c", "0x740c", "0x0bd5"]
    assert [g.rocm_version for g in gpus] == [None, "fake", "fake", None]
    assert all(g.fake and g.driver_version == "fake" for g in gpus)
    assert control == [str(tmp_path / "nvidiactl"), str(tmp_path / "kfd")]
    assert rdev(control[1]) == (KFD_MAJOR, 0)


@needs_root
def test_amd_and_intel_share_the_drm_numbering(tmp_path: Path) -> None:
    gpus, _ = make_fake_gpus(MIXED, tmp_path)
    drm = gpus[1:]
    assert [g.render_path for g in drm] == [str(tmp_path / "dri" / f"renderD{128 + k}") for k in range(3)]
    assert [g.card_path for g in drm] == [str(tmp_path / "dri" / f"card{k}") for k in range(3)]
    for k, gpu in enumerate(drm):
        assert rdev(gpu.render_path) == (DRM_MAJOR, 128 + k)
        assert rdev(gpu.card_path) == (DRM_MAJOR, k)
        assert gpu.device_path == gpu.render_path and gpu.minor == 128 + k


@needs_root
def test_mig_instances_get_uuids_ids_memory_and_cap_nodes(tmp_path: Path) -> None:
    gpu = make_fake_gpus(MIXED, tmp_path)[0][0]
    assert gpu.mig_enabled and not gpu.whole_free
    assert [(m.index, m.profile, m.slices) for m in gpu.mig] == [
        (0, "3g.40gb", 3),
        (1, "2g.20gb", 2),
        (2, "1g.10gb", 1),
        (3, "1g.10gb", 1),
    ]
    assert len({m.uuid for m in gpu.mig}) == 4 and all(m.uuid.startswith("MIG-fake-") for m in gpu.mig)
    assert [m.memory_bytes * 8 // gpu.memory_bytes for m in gpu.mig] == [4, 2, 1, 1]  # memory slices of 8
    for m in gpu.mig:
        gi_minor, ci_minor = mig_cap_minors(0, m.gpu_instance, m.compute_instance)
        assert m.cap_paths == (
            str(tmp_path / "nvidia-caps" / f"nvidia-cap{gi_minor}"),
            str(tmp_path / "nvidia-caps" / f"nvidia-cap{ci_minor}"),
        )
        assert [rdev(p) for p in m.cap_paths] == [(NVIDIA_CAPS_MAJOR, gi_minor), (NVIDIA_CAPS_MAJOR, ci_minor)]
    assert len({p for m in gpu.mig for p in m.cap_paths}) == 8  # no two instances share a cap node


@needs_root
def test_mig_word_combines_with_the_topology_word(tmp_path: Path) -> None:
    gpus, _ = make_fake_gpus("a100-80g:2:nvlink:mig=7g.80gb", tmp_path, cpus=8)
    assert [len(g.mig) for g in gpus] == [1, 1]
    assert gpus[0].mig[0].uuid != gpus[1].mig[0].uuid
    assert [g.numa_node for g in gpus] == [0, 1]


def test_mig_cap_minors_follow_the_drivers_numbering() -> None:
    # /proc/driver/nvidia-caps/mig-minors: gpu0/gi0/access 3, gpu0/gi0/ci0/access 4, gpu1/gi0/access 138
    assert mig_cap_minors(0, 0, 0) == (3, 4)
    assert mig_cap_minors(0, 1, 2) == (12, 15)
    assert mig_cap_minors(1, 0, 0) == (138, 139)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "h100:1:mig=4g.40gb+4g.40gb",
            "HETFLOW_FAKE_GPUS: 'h100:1:mig=4g.40gb+4g.40gb': layout 4g.40gb+4g.40gb takes 8 compute slices",
        ),
        ("a100:1:mig=1g.10gb", "'1g.10gb' is not a MIG profile of a100 (NVIDIA A100-SXM4-40GB); use 1g.5gb, 2g.10gb"),
        ("h200:1:mig=3g.40gb", "use 1g.18gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"),
        ("t4:1:mig=1g.5gb", "t4 has no MIG"),
        ("mi250x:1:mig=1g.10gb", "mi250x has no MIG"),
        ("h100:1:mig=", "mig= names no profile"),
        ("h100:mig=1g.10gb:mig=1g.10gb", "has 2 mig= words"),
        ("mi300x:2:nvlink", "mi300x is an AMD GPU without NVLink; use the pcie topology word"),
        # memory slices: 3g.40gb (4) + 3g.40gb (4) + 1g.10gb (1) = 9 of 8, compute 7 of 7
        ("h100:1:mig=3g.40gb+3g.40gb+1g.10gb", "takes 7 compute slices and 9 memory slices"),
    ],
)
def test_bad_mig_layouts_name_the_entry(spec: str, message: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_fake_entries(spec)
    assert message in str(caught.value)


def test_h100_accepts_its_1g_20gb_profile_and_a_full_layout() -> None:
    (entry,) = parse_fake_entries("h100:1:mig=1g.20gb+2g.20gb+3g.40gb")
    assert entry.mig == ("1g.20gb", "2g.20gb", "3g.40gb")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", GpuSharing()),
        ("exclusive", GpuSharing()),
        ("time-slicing:4", GpuSharing(mode="time-slicing", replicas=4)),
        ("Time_Slicing:2,slowdown=0.5", GpuSharing(mode="time-slicing", replicas=2, slowdown=0.5)),
        ("mps:4", GpuSharing(mode="mps", replicas=4)),
        ("mps:4,memory=10Gi", GpuSharing(mode="mps", replicas=4, mps_memory_limit=10 * 1024**3)),
    ],
)
def test_gpu_sharing_parses(text: str, expected: GpuSharing) -> None:
    assert parse_gpu_sharing(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("sliced:4", "'sliced' is not a sharing mode"),
        ("mps", "mps needs a replica count of 2 or more"),
        ("time-slicing:1", "shares nothing"),
        ("time-slicing:100", "replicas: Input should be less than or equal to 64"),
        ("exclusive:2", "exclusive takes no count or options"),
        ("mps:2,slowdown=1", "'slowdown=1' is not an option of mps (it takes memory=SIZE)"),
        ("time-slicing:2,slowdown=fast", "'slowdown=fast'"),
        ("mps:2,memory=lots", "is not a memory size"),
    ],
)
def test_bad_gpu_sharing_names_the_variable_value_and_an_example(text: str, why: str) -> None:
    with pytest.raises(InventoryError) as caught:
        parse_gpu_sharing(text)
    message = str(caught.value)
    assert message.startswith(f"HETFLOW_GPU_SHARING={text!r}: ")
    assert why in message
    assert message.endswith(
        "write one of exclusive, time-slicing:4, time-slicing:4,slowdown=0.5, mps:4 or mps:4,memory=10Gi"
    )


def test_discover_sets_the_sharing_policy(tmp_path: Path) -> None:
    node = discover(tmp_path, {"HETFLOW_GPU_SHARING": "time-slicing:4"}, sys_root=tmp_path / "nothing")
    assert node.gpu_sharing == GpuSharing(mode="time-slicing", replicas=4)
    with pytest.raises(InventoryError, match="HETFLOW_GPU_SHARING='mps:x'"):
        discover(tmp_path, {"HETFLOW_GPU_SHARING": "mps:x"}, sys_root=tmp_path / "nothing")
