"""The runner with GPU shares and MIG instances: who runs at once, on which part of which
GPU, and that the leases are gone at the end.  FAKE GPUs (``Gpu`` values), a fake engine
and a fake clock (``builders.world``)."""

from __future__ import annotations

from pathlib import Path

from hetflow.inventory import GpuSharing, MigDevice, Node
from tests.unit.builders import GIB, Outcome, gpu, node, world


def shared(sharing: GpuSharing, n: int = 1) -> Node:
    return node(gpus=tuple(gpu(i) for i in range(n))).model_copy(update={"gpu_sharing": sharing})


def steps(*shares: str) -> str:
    return "".join(f"t{i}:\n  image: x\n  resources: {{{r}}}\n" for i, r in enumerate(shares))


def ten(n: int) -> dict[str, list[Outcome]]:
    return {f"t{i}": [Outcome(duration=10)] for i in range(n)}


def test_time_slicing_runs_replicas_tenants_at_once_on_one_gpu(tmp_path: Path) -> None:
    n = shared(GpuSharing(mode="time-slicing", replicas=2))
    w = world(tmp_path, steps("gpu_share: 0.5", "gpu_share: 0.5", "gpu_share: 0.5"), node_=n, outcomes=ten(3))
    seen: list[str] = []
    w.clock.at[1005.0] = lambda: seen.append(w.store.step(w.run.id, "t2").reason)

    assert w.execute() == "succeeded"

    assert [s.at for s in w.script.log] == [1000.0, 1000.0, 1010.0]
    assert {s.spec.env["HETFLOW_GPU_UUIDS"] for s in w.script.log} == {n.gpus[0].uuid}
    assert [s.spec.env["HETFLOW_GPU_SHARE"] for s in w.script.log] == ["0.5"] * 3
    assert "2 of 2 time-slicing tenants" in seen[0]
    assert w.store.leases() == []


def test_mps_shares_sum_to_one_so_a_third_client_waits(tmp_path: Path) -> None:
    n = shared(GpuSharing(mode="mps", replicas=4))
    w = world(tmp_path, steps("gpu_share: 0.5", "gpu_share: 0.25", "gpu_share: 0.5"), node_=n, outcomes=ten(3))

    assert w.execute() == "succeeded"

    assert [(s.step, s.at) for s in w.script.log] == [("t0", 1000.0), ("t1", 1000.0), ("t2", 1010.0)]
    limits = [s.spec.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for s in w.script.log]
    assert limits == ["50", "25", "50"]
    assert w.store.leases() == []


def test_a_share_on_an_exclusive_machine_takes_a_whole_gpu_and_says_so(tmp_path: Path) -> None:
    n = shared(GpuSharing(), n=1)
    w = world(tmp_path, steps("gpu_share: 0.25", "gpu_share: 0.25"), node_=n, outcomes=ten(2))

    assert w.execute() == "succeeded"

    assert [s.at for s in w.script.log] == [1000.0, 1010.0]  # one tenant per exclusive GPU
    assert "exclusive" in w.step("t0").reason and "whole" in w.step("t0").reason
    assert "HETFLOW_GPU_SHARE" not in w.script.log[0].spec.env


def test_mig_steps_run_at_once_each_on_its_instance(tmp_path: Path) -> None:
    migs = tuple(
        MigDevice(index=i, uuid=f"MIG-{i}", profile="1g.10gb", slices=1, memory_bytes=10 * GIB) for i in range(2)
    )
    n = node(gpus=(gpu(0).model_copy(update={"mig": migs, "mig_enabled": True}),))
    w = world(tmp_path, steps("gpu_mig: 1g.10gb", "gpu_mig: 1g.10gb", "gpu_mig: 1g.10gb"), node_=n, outcomes=ten(3))

    assert w.execute() == "succeeded"

    assert [s.at for s in w.script.log] == [1000.0, 1000.0, 1010.0]
    assert [s.spec.env["NVIDIA_VISIBLE_DEVICES"] for s in w.script.log[:2]] == ["MIG-0", "MIG-1"]
    assert "MIG 1g.10gb #0 of GPU 0" in next(e.message for e in w.store.events(w.run.id) if "attempt 1" in e.message)
    assert w.store.leases() == []
