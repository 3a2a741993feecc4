"""The image resolver for AMD and Intel GPUs: gfx targets (fat binaries), Intel families,
ROCm's +/-2 release window.  The nodes are built in memory: no devices at all."""

from __future__ import annotations

import json

import pytest

from hetflow.images import FakeRegistry, ImageSource, Requirements, build_index_image, parse_requirements, resolve
from hetflow.images.matching.gpumatch import check_rocm, parse_gfx, rocm_distance
from hetflow.images.matching.match import annotations_for, features_for
from hetflow.inventory import Gpu, GpuVendorName, Node
from tests.unit.test_images_match import card, entry, index, machine, name_of, verdict


def accel(vendor: GpuVendorName, arch: str, *, rocm: str | None = "6.2.0", index: int = 0) -> Gpu:
    """An AMD (gfx target ``arch``, ROCm ``rocm``) or Intel (family ``arch``) GPU."""
    return Gpu(
        index=index,
        uuid=f"GPU-{vendor}-{index}",
        model=f"Test {vendor} GPU",
        memory_bytes=64 * 1024**3,
        vendor=vendor,
        architecture=arch,
        rocm_version=rocm if vendor == "amd" else None,
        driver_version="6.8.5",
        device_path=f"/dev/dri/renderD{128 + index}",
        minor=128 + index,
    )


def mi250x(rocm: str | None = "6.2.0") -> Node:
    return machine("zen3", accel("amd", "gfx90a", rocm=rocm))


@pytest.mark.parametrize(
    ("features", "node", "ok", "reason"),
    [
        pytest.param("gpu:gfx90a", mi250x(), True, "gpu:gfx90a: node has gfx90a", id="same-target"),
        pytest.param("gpu:gfx90a+gfx942", mi250x(), True, "node has gfx90a", id="fat-binary-fits-either"),
        pytest.param(
            "gpu:gfx942",
            mi250x(),
            False,
            "gfx942 build has code for gfx942 only; node has gfx90a",
            id="no-forward-compat-across-targets",
        ),
        pytest.param("gpu:gfx90a", machine("zen3", card()), False, "node has no AMD GPU", id="nvidia-node"),
        pytest.param("gpu:pvc", machine("zen3", accel("intel", "pvc")), True, "node has Intel pvc", id="intel-pvc"),
        pytest.param(
            "gpu:pvc", machine("zen3", accel("intel", "dg2")), False, "compiled for Intel pvc only", id="intel-dg2"
        ),
        pytest.param("gpu:amd", mi250x(), True, "node has 1 AMD GPU", id="any-amd"),
        pytest.param("gpu:intel", mi250x(), False, "Intel GPU build needs an Intel GPU; node has none", id="no-intel"),
        pytest.param("gpu", mi250x(), True, "node has 1 GPU", id="any-gpu-is-any-vendor"),
        pytest.param("gpu:sm_80", mi250x(), False, "node has no NVIDIA GPU", id="cuda-build-on-amd"),
        pytest.param("gpu:nvidia", mi250x(), False, "needs an NVIDIA GPU", id="nvidia-only"),
    ],
)
def test_gpu_target_matching(features: str, node: Node, ok: bool, reason: str) -> None:
    fits, why = verdict(entry("b", features), node)
    assert fits is ok
    assert reason in why


@pytest.mark.parametrize(
    ("build", "node", "ok"),
    [
        ("6.2", "6.2.0", True),
        ("6.2", "6.4.1", True),  # driver two releases newer
        ("6.2", "6.0.2", True),  # two older
        ("6.2", "5.7.1", False),  # three older: 5.7, 6.0, 6.1, 6.2
        ("6.2", "7.0.0", False),  # three newer: 6.3, 6.4, 7.0
        ("7.2", "7.4.0", True),  # past the table: 7.3, 7.4 continue it
        ("6.0", "5.6.0", True),  # AMD's matrix: KFD 6.0 with 5.6.x user space
        ("6.0", "5.5.0", False),
    ],
)
def test_rocm_window(build: str, node: str, ok: bool) -> None:
    fits, why = verdict(entry("r", f"gpu:gfx90a,rocm>={build}"), mi250x(node))
    assert fits is ok, why
    if not ok:
        assert f"rocm>={build} build runs on a ROCm driver at most 2 releases apart" in why


def test_rocm_unknown_on_fake_gpus_is_said() -> None:
    node = machine("zen3", accel("amd", "gfx90a", rocm="fake").model_copy(update={"fake": True}))
    fits, why = verdict(entry("r", "rocm>=6.2"), node)
    assert not fits
    assert "node's is unknown (fake GPU without a ROCm version)" in why


def test_rocm_distance_counts_releases_across_majors() -> None:
    assert rocm_distance((5, 7), (6, 0)) == 1
    assert rocm_distance((6, 4), (7, 0)) == 1
    assert check_rocm((6, 2), (6, 4)) is None
    assert "3 releases older" in (check_rocm((6, 2), (5, 7)) or "")


def test_gfx_parsing_drops_target_features_and_rejects_others() -> None:
    assert parse_gfx("gfx942,gfx90a:xnack-") == ("gfx90a", "gfx942")
    assert parse_gfx("gfx90a+sm_80") is None


def test_resolver_picks_the_amd_build_on_an_amd_node_and_the_cuda_build_on_nvidia() -> None:
    idx = index(
        entry("generic"), entry("cuda", "gpu:sm_80"), entry("rocm", "gpu:gfx90a+gfx942"), entry("xe", "gpu:pvc")
    )
    assert name_of(resolve(idx, mi250x()).chosen) == "rocm"
    assert name_of(resolve(idx, machine("zen3", card("9.0"))).chosen) == "cuda"
    assert name_of(resolve(idx, machine("zen3", accel("intel", "pvc"))).chosen) == "xe"
    assert name_of(resolve(idx, machine("zen3")).chosen) == "generic"
    lines = resolve(idx, mi250x()).explain()
    assert any("rejected" in line and "no NVIDIA GPU" in line for line in lines)  # the CUDA build says why not


def test_annotations_alone_carry_amd_needs() -> None:
    annotated = entry("a", annotations={"org.hetflow.gpu.gfx": "gfx942", "org.hetflow.rocm": "6.2"})
    fits, why = verdict(annotated, mi250x())
    assert not fits and "gfx942 build has code for gfx942 only" in why
    bad = entry("b", annotations={"org.hetflow.gpu.gfx": "sm_80"})
    assert "is not gfx targets" in verdict(bad, mi250x())[1]


def test_one_build_cannot_need_two_vendors() -> None:
    fits, why = verdict(entry("x", "gpu:sm_80,gpu:gfx90a"), machine("zen3", card(), accel("amd", "gfx90a", index=1)))
    assert not fits and "asks for GPUs of amd and nvidia at once" in why


@pytest.mark.parametrize("features", ["gpu:gfx90a+gfx942,rocm>=6.2", "gpu:pvc+dg2", "gpu:amd", "gpu:intel"])
def test_writing_vendor_requirements_reads_back(features: str) -> None:
    req = parse_requirements(features)
    assert not req.unknown
    again = parse_requirements(features_for(req))
    assert again == req
    from_annotations = parse_requirements([])
    assert isinstance(from_annotations, Requirements)
    assert set(annotations_for(req)) <= {"org.hetflow.gpu.gfx", "org.hetflow.gpu.intel", "org.hetflow.rocm"}


def test_build_index_writes_a_gfx90a_entry() -> None:
    """hetflow images build-index with an AMD build: features and annotations in the index."""
    registry = FakeRegistry()
    for tag in ("generic", "rocm"):
        registry.add_image("hf/app", tag, env={"BUILD": tag})
    build_index_image(
        "registry.test/hf/app:latest",
        ["generic", "rocm=gpu:gfx90a,rocm>=6.2"],
        ImageSource(transport=registry.transport()),
    )
    body, _ = registry.manifests[registry.tags[("hf/app", "latest")]]
    rocm = json.loads(body)["manifests"][1]
    assert rocm["platform"]["features"] == ["gpu:gfx90a", "rocm>=6.2"]
    assert rocm["annotations"]["org.hetflow.gpu.gfx"] == "gfx90a"
    assert rocm["annotations"]["org.hetflow.rocm"] == "6.2"
