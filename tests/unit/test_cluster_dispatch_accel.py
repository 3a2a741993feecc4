"""A cluster engine is told what the plan decided for a GPU slice: the class's sharing
policy (Slurm: shard or mps gres) and, for a gpu_share step the plan gave a whole GPU,
a whole GPU."""

from __future__ import annotations

from hetflow.execute.run.dispatching.dispatch import ClusterDispatch
from hetflow.execute.run.launch.launcher import engine_request
from hetflow.inventory import GpuSharing
from hetflow.plan.instance import MachineClass, Placement
from hetflow.spec import GpuRequest, Resources, Variant
from tests.unit.builders import node as make_node


def _dispatch(share: float) -> ClusterDispatch:
    ts = GpuSharing(mode="time-slicing", replicas=4)
    classes = [MachineClass(name="gpu.ts", count=2, cores=8, memory=2**34, gpus=2, gpu_model="A100", gpu_sharing=ts)]
    placed = Placement("s", "default", "gpu.ts-0", "gpu.ts", 0.0, 1.0, 1.0, 2**20, gpus=(0,), share=share)
    return ClusterDispatch(make_node(), {"s": placed}, classes)


def test_a_planned_share_keeps_its_share_and_the_class_policy() -> None:
    where = _dispatch(0.25).where("s")
    assert where.gpu_sharing == GpuSharing(mode="time-slicing", replicas=4)
    variant = Variant(image="x", resources=Resources(gpu_share=0.25, gpu_vendor="nvidia"))
    assert engine_request(variant, where) == GpuRequest(share=0.25)


def test_a_share_the_plan_gave_a_whole_gpu_asks_the_engine_for_one() -> None:
    where = _dispatch(0.0).where("s")
    variant = Variant(image="x", resources=Resources(gpu_share=0.25, gpu_memory="4Gi"))
    assert engine_request(variant, where) == GpuRequest(count=1, memory=4 * 1024**3)


def test_cpu_and_mig_requests_pass_through() -> None:
    where = _dispatch(0.0).where("s")
    assert engine_request(Variant(image="x"), where) is None
    mig = Variant(image="x", resources=Resources(gpu_mig="1g.10gb"))
    assert engine_request(mig, where) == GpuRequest(mig="1g.10gb")
