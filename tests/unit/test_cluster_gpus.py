"""Cluster files with AMD/Intel GPUs, sharing policies and MIG layouts; vendor-aware filters;
a probed machine with an NVIDIA and an AMD GPU.  No GPU here: GPUs are values (fake
devices for the probed node), and every time is the planner's model."""

from __future__ import annotations

import textwrap

import pytest

from hetflow.errors import NoFitError, SpecError
from hetflow.inventory import Gpu
from hetflow.plan.build import build_instance
from hetflow.plan.checking.validate import check_plan
from hetflow.plan.feasible.filters import class_rejections, qualifying_gpus
from hetflow.plan.search.heuristic import plan_heuristic
from hetflow.plan.sizing.cluster import node_class, parse_cluster
from hetflow.spec import GpuConstraint, Resources, Variant, parse_workflow
from tests.unit.builders import GIB, gpu, node

HEAD = "apiVersion: hetflow/v1\nkind: Cluster\nname: c\nnodeTypes:\n"


def cluster(gpus: str, count: int = 1) -> str:
    body = f"  - name: g\n    count: {count}\n    cores: 32\n    memory: 256Gi\n    price: 10\n"
    return HEAD + body + f"    gpus: {gpus}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as exc:
        parse_cluster(text, "c.yaml")
    return [str(p) for p in exc.value.problems]


A100 = 'model: NVIDIA A100-SXM4-80GB, count: 2, memory: 80Gi, computeCapability: "8.0"'


def test_amd_and_intel_node_types_need_no_compute_capability() -> None:
    amd = parse_cluster(cluster("{vendor: amd, model: AMD Instinct MI250X, count: 8, memory: 64Gi, "
                                "architecture: gfx90a, rocm: '6.0'}"))  # fmt: skip
    (c,) = amd.classes()
    assert (c.gpu_vendor, c.gpu_arch, c.gpu_rocm, c.gpu_cc, c.gpu_speed) == ("amd", "gfx90a", "6.0", (0, 0), 1.0)
    intel = parse_cluster(cluster("{vendor: intel, model: Intel Data Center GPU Max 1550, count: 4, memory: 128Gi}"))
    assert intel.classes()[0].gpu_vendor == "intel"


def test_sharing_and_mig_reach_the_machine_class() -> None:
    ts = parse_cluster(cluster("{" + A100 + ", sharing: {mode: time-slicing, replicas: 4, slowdown: 0.5}}"))
    c = ts.classes()[0]
    assert (c.gpu_sharing.mode, c.gpu_sharing.replicas, c.gpu_sharing.resolved_slowdown) == ("time-slicing", 4, 0.5)
    mig = parse_cluster(cluster("{" + A100 + ", mig: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}"))
    assert mig.classes()[0].mig == ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    assert mig.classes()[0].gpu_kind(1).mig == ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        pytest.param(
            "{model: NVIDIA A100-SXM4-80GB, count: 1, memory: 80Gi}",
            "NVIDIA GPU 'NVIDIA A100-SXM4-80GB' needs computeCapability",
            id="nvidia-needs-cc",
        ),
        pytest.param(
            "{vendor: amd, model: AMD Instinct MI250X, count: 1, memory: 64Gi, mig: [1g.10gb]}",
            "mig: MIG is an NVIDIA feature; amd GPUs have no MIG layout, remove mig",
            id="mig-on-amd",
        ),
        pytest.param(
            "{" + A100 + ", mig: [3g.40gb, 3g.40gb, 2g.20gb]}",
            "uses 8 slices; a GPU has 7",
            id="layout-over-7-slices",
        ),
        pytest.param(
            '{model: NVIDIA A100-SXM4-40GB, count: 1, memory: 40Gi, computeCapability: "8.0", mig: [7g.80gb]}',
            "mig profile 7g.80gb needs 80 GB; the GPU has 40 GiB",
            id="profile-bigger-than-gpu",
        ),
        pytest.param(
            "{" + A100 + ", mig: [1g.10gb], sharing: {mode: time-slicing, replicas: 2}}",
            "use either mig or sharing, not both",
            id="mig-and-time-slicing",
        ),
        pytest.param(
            "{" + A100 + ", sharing: {mode: time-slicing, replicas: 1}}",
            "time-slicing with replicas 1 shares nothing",
            id="sharing-one-replica",
        ),
        pytest.param("{" + A100 + ", sharing: {mode: timeslice}}", "sharing.mode", id="sharing-bad-mode"),
        pytest.param("{" + A100 + ", mig: [big]}", "'big' is not a MIG profile", id="bad-profile"),
    ],
)
def test_bad_gpu_entries_name_the_file_line_and_value(gpus: str, message: str) -> None:
    found = problems(cluster(gpus))
    assert len(found) == 1, found
    assert found[0].startswith("c.yaml:10: error: nodeTypes.0.gpus"), found
    assert message in found[0], found


def test_default_speeds_for_amd_and_intel_are_marked_assumed() -> None:
    from hetflow.plan.gpuspec import GPU_SPEEDS, default_gpu_speed

    assert default_gpu_speed("AMD Instinct MI300X") == 1.8
    assert default_gpu_speed("AMD Instinct MI250X") == 1.0
    for key in ("MI250X", "MI300X", "Max 1550"):
        assert next(src for k, _, src in GPU_SPEEDS if k == key).startswith("assumed")


# --- filters ----------------------------------------------------------------------------


def variant(**res: object) -> Variant:
    return Variant(image="img", resources=Resources.model_validate({"cpus": 1, **res}))


def test_vendor_filter_names_field_and_what_the_class_has() -> None:
    (c,) = parse_cluster(cluster("{" + A100 + "}")).classes()
    (st,) = class_rejections(variant(gpus=1, gpu_vendor="amd"), c)
    assert st.code == "gpu_vendor"
    assert st.reason == "asks for gpu_vendor: amd; g has 2 nvidia GPUs (NVIDIA A100-SXM4-80GB)"
    assert class_rejections(variant(gpus=1, gpu_vendor="any"), c) == ()


def test_compute_capability_is_checked_for_nvidia_only() -> None:
    (amd,) = parse_cluster(cluster("{vendor: amd, model: AMD Instinct MI250X, count: 1, memory: 64Gi}")).classes()
    v = Variant(
        image="img",
        resources=Resources(gpus=1, gpu_vendor="amd"),
        gpu=GpuConstraint(min_compute_capability="8.0"),
    )
    assert class_rejections(v, amd) == ()
    (nv,) = parse_cluster(cluster('{model: Tesla T4, count: 1, memory: 16Gi, computeCapability: "7.5"}')).classes()
    assert [s.code for s in class_rejections(v.model_copy(update={"resources": Resources(gpus=1)}), nv)] == ["gpu_cc"]


def test_mig_profile_and_instance_memory() -> None:
    (c,) = parse_cluster(cluster("{" + A100 + ", mig: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}")).classes()
    assert class_rejections(variant(gpu_mig="1g.10gb"), c) == ()
    (st,) = class_rejections(variant(gpu_mig="4g.40gb"), c)
    assert st.reason == "asks for gpu_mig: 4g.40gb; g has MIG layout 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb"
    big = Variant(image="img", resources=Resources(gpu_mig="1g.10gb"), gpu=GpuConstraint(min_memory=16 * GIB))
    (st,) = class_rejections(big, c)
    assert st.code == "gpu_memory" and "MIG 1g.10gb instance has 10" in st.reason, st
    (st,) = class_rejections(variant(gpus=1), c)
    assert "in MIG mode" in st.reason and "gpu_mig" in st.reason


def test_no_node_for_a_mig_step_names_the_field_and_the_nodes() -> None:
    wf = parse_workflow(
        "apiVersion: hetflow/v1\nname: wf\nsteps:\n  a: {image: img, resources: {gpu_mig: 1g.10gb}}\n", "wf.yaml"
    ).workflow
    cl = parse_cluster(cluster("{" + A100 + "}"))
    with pytest.raises(NoFitError) as exc:
        build_instance(wf, cl.classes(), bandwidth=1e9)
    assert "asks for gpu_mig: 1g.10gb; g has no GPU in MIG mode" in str(exc.value)


def test_qualifying_gpus_is_vendor_aware() -> None:
    nv = gpu(0)
    amd = Gpu.model_validate(
        {**gpu(1).model_dump(), "vendor": "amd", "model": "AMD Instinct MI250X", "compute_capability": ""}
    )
    assert qualifying_gpus(variant(gpus=1, gpu_vendor="amd"), [nv, amd]) == [amd]
    assert qualifying_gpus(variant(gpus=1), [nv, amd]) == [nv]
    assert qualifying_gpus(variant(gpus=1, gpu_vendor="any"), [nv, amd]) == [nv, amd]


# --- a machine with an NVIDIA and an AMD GPU --------------------------------------------


def mixed_node() -> object:
    h100 = gpu(0, model="NVIDIA H100 80GB HBM3", memory_gib=80, cc="9.0")
    mi = Gpu.model_validate(
        {
            **gpu(1).model_dump(),
            "vendor": "amd",
            "model": "AMD Instinct MI250X",
            "compute_capability": "",
            "architecture": "gfx90a",
            "memory_bytes": 64 * GIB,
        }
    )
    return node(cpus=16, memory_gib=64, gpus=(h100, mi))


def test_probed_node_with_unlike_gpus_keeps_each_kind() -> None:
    c = node_class(mixed_node())  # type: ignore[arg-type]
    assert [k.vendor for k in c.gpu_kinds] == ["nvidia", "amd"]
    assert c.gpu_kind(1).arch == "gfx90a"
    assert c.gpu_kind(0).speed == 1.8


def test_a_vendor_step_gets_only_its_vendors_gpu_on_a_mixed_machine() -> None:
    c = node_class(mixed_node())  # type: ignore[arg-type]
    body = textwrap.dedent(
        """\
        apiVersion: hetflow/v1
        name: wf
        steps:
          rocm1: {image: img, estimate: 10, resources: {gpus: 1, gpu_vendor: amd}}
          rocm2: {image: img, estimate: 10, resources: {gpus: 1, gpu_vendor: amd}}
          cuda: {image: img, estimate: 10, resources: {gpus: 1}}
        """
    )
    wf = parse_workflow(body, "wf.yaml").workflow
    inst = build_instance(wf, [c], bandwidth=1e9)
    plan = plan_heuristic(inst)
    assert check_plan(inst, plan) == []
    assert plan.placements["rocm1"].gpus == (1,) and plan.placements["rocm2"].gpus == (1,)
    assert plan.placements["cuda"].gpus == (0,)
    # the two AMD steps take turns on the one AMD GPU though the NVIDIA one is free
    a, b = sorted((plan.placements["rocm1"], plan.placements["rocm2"]), key=lambda p: p.start)
    assert b.start >= a.finish


def test_this_machine_says_which_vendor_or_mig_profile_it_lacks() -> None:
    from hetflow.plan.feasible.filters import Capacity, check

    n = node(cpus=8, gpus=(gpu(0),))
    st = check(variant(gpus=1, gpu_vendor="amd"), Capacity.of(n), where="this machine", now=False)
    assert (st.code, st.reason) == (
        "gpu_vendor",
        "asks for gpu_vendor: amd; this machine has 1 nvidia GPU (NVIDIA A100-SXM4-40GB)",
    )
    st = check(variant(gpu_mig="1g.10gb"), Capacity.of(n), where="this machine", now=False)
    assert (st.code, st.reason) == ("gpu_mig", "asks for gpu_mig: 1g.10gb; this machine has no GPU in MIG mode")


def test_a_gang_of_one_vendor_takes_only_its_gpus_on_a_mixed_machine() -> None:
    amd = {**gpu(0).model_dump(), "vendor": "amd", "model": "AMD Instinct MI250X", "compute_capability": ""}
    gpus = (gpu(0), gpu(1), Gpu.model_validate({**amd, "index": 2}), Gpu.model_validate({**amd, "index": 3}))
    c = node_class(node(cpus=16, memory_gib=64, gpus=gpus))
    body = (
        "apiVersion: hetflow/v1\nname: wf\nsteps:\n"
        "  train: {image: img, estimate: 10, gang: {replicas: 2}, resources: {gpus: 1, gpu_vendor: amd}}\n"
    )
    inst = build_instance(parse_workflow(body, "wf.yaml").workflow, [c], bandwidth=1e9)
    plan = plan_heuristic(inst)
    assert check_plan(inst, plan) == []
    assert sorted(g for _, gs in plan.placements["train"].ranks for g in gs) == [2, 3]
