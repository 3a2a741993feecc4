"""A stored plan keeps what accelerators need: a class's sharing policy, MIG layout and
per-GPU kinds, and a placement's share or MIG device, through JSON and back."""

from __future__ import annotations

import json

from hetflow.inventory import GpuSharing
from hetflow.plan.instance import GpuKind, MachineClass, Placement, Plan
from hetflow.plan.stored import machine_class_from_dict, machine_class_to_dict, plan_from_dict, plan_to_dict


def test_a_class_with_sharing_mig_and_unlike_gpus_round_trips_through_json() -> None:
    cls = MachineClass(
        name="mixed",
        count=1,
        cores=8,
        memory=2**34,
        gpus=2,
        gpu_sharing=GpuSharing(mode="mps", replicas=4, mps_memory_limit=2**33),
        mig=("3g.40gb", "1g.10gb"),
        gpu_kinds=(
            GpuKind(vendor="nvidia", model="NVIDIA H100 80GB HBM3", memory=2**36, cc=(9, 0), mig=("3g.40gb",)),
            GpuKind(vendor="amd", model="AMD Instinct MI250X", memory=2**36, arch="gfx90a", rocm="6.1"),
        ),
    )
    back = machine_class_from_dict(json.loads(json.dumps(machine_class_to_dict(cls))))
    assert back == cls
    assert back.gpu_kind(1).arch == "gfx90a"


def test_an_old_stored_class_without_the_new_fields_reads_as_exclusive() -> None:
    data = machine_class_to_dict(MachineClass(name="old", count=1, cores=4, memory=2**30))
    for key in ("gpu_sharing", "gpu_kinds", "mig", "gpu_vendor"):
        data.pop(key)
    back = machine_class_from_dict(data)
    assert (back.gpu_sharing, back.gpu_kinds, back.mig, back.gpu_vendor) == (GpuSharing(), (), (), "nvidia")


def test_a_placements_share_and_mig_device_survive() -> None:
    plan = Plan(
        placements={
            "a": Placement("a", "gpu", "n-0", "n", 0.0, 2.0, 1.0, 2**20, gpus=(0,), share=0.25),
            "b": Placement("b", "gpu", "n-0", "n", 0.0, 2.0, 1.0, 2**20, gpus=(1,), mig_device=2),
        },
        makespan=2.0,
        cost=0.0,
        algorithm="test",
    )
    assert plan_from_dict(json.loads(json.dumps(plan_to_dict(plan)))) == plan


def test_the_plan_table_shows_a_share_and_a_mig_device() -> None:
    from hetflow.report.plan import where

    share = Placement("a", "gpu", "n-0", "n", 0.0, 2.0, 1.0, 2**20, gpus=(1,), share=0.25)
    mig = Placement("b", "gpu", "n-0", "n", 0.0, 2.0, 1.0, 2**20, gpus=(0,), mig_device=2)
    whole = Placement("c", "gpu", "n-0", "n", 0.0, 2.0, 1.0, 2**20, gpus=(0, 1))
    assert [where(p)[1] for p in (share, mig, whole)] == ["1 (0.25)", "0/mig2", "0,1"]
