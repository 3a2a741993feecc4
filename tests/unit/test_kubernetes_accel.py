"""The Kubernetes export of shared, MIG, AMD and Intel GPU steps: the device-plugin limits
and the node labels (GFD, the AMD labeller, Intel's NFD rules) each step asks for, per
vendor and per sharing mode.  Plans and node classes are built directly here (not by the
planner), and every export passes the official client's model check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from hetflow.export.kubernetes import export_kubernetes, validate_objects
from hetflow.inventory import GpuSharing
from hetflow.plan.instance import MachineClass, Placement, Plan
from tests.unit.builders import load_steps

Obj = dict[str, Any]
A100 = "NVIDIA A100-SXM4-80GB"


class _Classes:
    """What the exporter reads of a cluster: its classes."""

    def __init__(self, classes: Sequence[MachineClass]) -> None:
        self._classes = list(classes)

    def classes(self) -> list[MachineClass]:
        return self._classes


def _cls(name: str, **kw: Any) -> MachineClass:
    return MachineClass(name=name, count=1, cores=16, memory=64 << 30, gpus=kw.pop("gpus", 4), **kw)


def _export(resources: str, cls: MachineClass, *, share: float = 0.0, mig: int | None = None) -> tuple[Obj, Obj]:
    """(the step container, its pod spec) of a one-step workflow placed on ``cls``."""
    workflow = load_steps(f"s:\n  image: img\n  resources: {resources}\n").workflow
    p = Placement("s", "default", f"{cls.name}-0", cls.name, 0.0, 10.0, 1.0, 1 << 30, (0,), share=share, mig_device=mig)
    plan = Plan({"s": p}, makespan=10.0, cost=0.0, algorithm="test")
    objects = export_kubernetes(workflow, _Classes([cls]), plan, run_id="r1", uid=1000, gid=1000)  # type: ignore[arg-type]
    assert validate_objects(objects) == []
    job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["labels"].get("hetflow.step") == "s")
    pod: Obj = job["spec"]["template"]["spec"]
    return pod["containers"][0], pod


def _exprs(pod: Obj) -> list[tuple[str, str, tuple[str, ...]]]:
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (term,) = terms
    return [(e["key"], e["operator"], tuple(e.get("values", ()))) for e in term["matchExpressions"]]


def _gpu_limits(c: Obj) -> dict[str, str]:
    return {k: v for k, v in c["resources"]["limits"].items() if k not in ("cpu", "memory")}


def _env(c: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", [])}


def test_a_time_sliced_share_takes_one_replica_of_a_node_with_that_many() -> None:
    cls = _cls("ts", gpu_model=A100, gpu_sharing=GpuSharing(mode="time-slicing", replicas=4))
    c, pod = _export("{gpu_share: 0.25}", cls, share=0.25)
    assert _gpu_limits(c) == {"nvidia.com/gpu": "1"}
    exprs = _exprs(pod)
    assert ("nvidia.com/gpu.product", "In", ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB-SHARED")) in exprs
    assert ("nvidia.com/gpu.sharing-strategy", "In", ("time-slicing",)) in exprs
    assert ("nvidia.com/gpu.replicas", "In", ("4",)) in exprs
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(c)  # the device plugin sets it


def test_an_mps_share_selects_mps_nodes() -> None:
    cls = _cls("mps", gpu_model=A100, gpu_sharing=GpuSharing(mode="mps", replicas=2))
    c, pod = _export("{gpu_share: 0.5}", cls, share=0.5)
    assert _gpu_limits(c) == {"nvidia.com/gpu": "1"}
    assert ("nvidia.com/gpu.sharing-strategy", "In", ("mps",)) in _exprs(pod)
    assert ("nvidia.com/gpu.replicas", "In", ("2",)) in _exprs(pod)


def test_a_mig_instance_is_its_profiles_resource_under_the_mixed_strategy() -> None:
    cls = _cls("mig", gpu_model=A100, mig=("1g.10gb",) * 7)
    c, pod = _export("{gpu_mig: 1g.10gb}", cls, mig=0)
    assert _gpu_limits(c) == {"nvidia.com/mig-1g.10gb": "1"}
    exprs = _exprs(pod)
    assert ("nvidia.com/mig.strategy", "In", ("mixed",)) in exprs
    assert ("nvidia.com/mig-1g.10gb.count", "Gt", ("0",)) in exprs
    assert not [e for e in exprs if e[0] == "nvidia.com/gpu.product"]  # mixed: the product label is the GPU's


def test_whole_nvidia_gpus_keep_off_shared_nodes() -> None:
    c, pod = _export("{gpus: 2}", _cls("nv", gpu_model=A100))
    assert _gpu_limits(c) == {"nvidia.com/gpu": "2"}
    assert ("nvidia.com/gpu.sharing-strategy", "NotIn", ("time-slicing", "mps")) in _exprs(pod)
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_amd_gpus_are_amd_com_gpu_on_labelled_amd_nodes() -> None:
    cls = _cls("amd", gpu_model="AMD Instinct MI300X", gpu_vendor="amd", gpu_arch="gfx942")
    c, pod = _export("{gpus: 2, gpu_vendor: amd}", cls)
    assert _gpu_limits(c) == {"amd.com/gpu": "2"}
    exprs = _exprs(pod)
    assert ("amd.com/gpu.family", "Exists", ()) in exprs
    assert ("amd.com/gpu.product-name", "In", ("AMD_Instinct_MI300X",)) in exprs
    assert not [e for e in exprs if e[0].startswith("nvidia.com/")]
    assert _env(c)["NVIDIA_VISIBLE_DEVICES"] == "void"  # a CUDA base image must not reach NVIDIA GPUs
    assert pod["tolerations"][0]["key"] == "amd.com/gpu"


def test_intel_gpus_are_i915_on_nfd_labelled_nodes() -> None:
    cls = _cls("intel", gpu_model="Intel Data Center GPU Max 1550", gpu_vendor="intel", gpu_arch="pvc")
    c, pod = _export("{gpus: 1, gpu_vendor: intel}", cls)
    assert _gpu_limits(c) == {"gpu.intel.com/i915": "1"}
    exprs = _exprs(pod)
    assert ("intel.feature.node.kubernetes.io/gpu", "In", ("true",)) in exprs
    assert ("gpu.intel.com/product", "In", ("Max_1550",)) in exprs


def test_vendor_any_takes_the_planned_classs_vendor() -> None:
    cls = _cls("amd", gpu_model="AMD Instinct MI250X", gpu_vendor="amd")
    c, _ = _export("{gpus: 1, gpu_vendor: any}", cls)
    assert _gpu_limits(c) == {"amd.com/gpu": "1"}


@pytest.mark.parametrize("vendor", ["amd", "intel"])
def test_a_share_on_amd_or_intel_holds_one_device(vendor: str) -> None:
    cls = _cls(vendor, gpu_model="x", gpu_vendor=vendor, gpu_sharing=GpuSharing(mode="time-slicing", replicas=2))
    c, _ = _export(f"{{gpu_share: 0.5, gpu_vendor: {vendor}}}", cls, share=0.5)
    assert _gpu_limits(c) == {"amd.com/gpu" if vendor == "amd" else "gpu.intel.com/i915": "1"}


def test_a_cpu_step_on_an_amd_class_asks_for_no_gpu() -> None:
    c, pod = _export("{cpus: 1}", _cls("amd", gpu_model="AMD Instinct MI250X", gpu_vendor="amd"))
    assert _gpu_limits(c) == {}
    assert ("amd.com/gpu.family", "Exists", ()) in _exprs(pod)
