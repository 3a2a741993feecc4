"""Shares and AMD GPUs on a real 3-node Ray cluster (ray_fixture's ``ray_acc_cluster``;
fake GPUs: mknod'd device nodes, so this proves scheduling and what each container is
given, not GPU computation): two half-GPU shares run at once on the one A100 (fractional
num_gpus), an AMD step lands on the MI250X node and sees only its render node and kfd, a
MIG step takes the node's mig-1g.10gb resource."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.ray import RayBackend
from hetflow.spec import GpuRequest
from tests.contract.backend_contract import job, wait_done
from tests.integration.ray_fixture import RayCluster, ray_acc_cluster

__all__ = ["ray_acc_cluster"]  # the module fixture

SEE = (
    "date +%s > /out/t0; for d in /dev/nvidia* /dev/kfd /dev/dri/*; do [ -e $d ] && echo $d; done > /out/devs; "
    "env | grep -E '^(CUDA|ROCR|HIP|ZE)_' | sort > /out/env; sleep {sleep}; date +%s > /out/t1"
)


def _job(name: str, out: Path, req: GpuRequest, model: str | None = None, sleep: int = 0) -> Job:
    return replace(
        job(name, out, SEE.format(sleep=sleep), run_id="racc", gpus=req.count), gpu_model=model, gpu_request=req
    )


def _read(out: Path, name: str) -> list[str]:
    return (out / name).read_text().split()


def test_shares_pack_onto_one_gpu_and_amd_steps_see_their_render_nodes(
    ray_acc_cluster: RayCluster, tmp_path: Path
) -> None:
    backend = RayBackend(ray_acc_cluster.settings())
    backend.check()
    a100 = "NVIDIA A100-SXM4-40GB"
    jobs = [
        _job("hf-racc-half-a-1", tmp_path / "a", GpuRequest(share=0.5), a100, sleep=3),
        _job("hf-racc-half-b-1", tmp_path / "b", GpuRequest(share=0.5), a100, sleep=3),
        _job("hf-racc-amd-1", tmp_path / "amd", GpuRequest(count=1, vendor="amd"), "AMD Instinct MI250X"),
        _job("hf-racc-amd2-1", tmp_path / "amd2", GpuRequest(count=1, vendor="amd")),  # by the vendor marker
        _job("hf-racc-mig-1", tmp_path / "mig", GpuRequest(mig="1g.10gb")),
    ]
    for j in jobs:
        backend.submit(j)
    states = wait_done(backend, "racc", [j.name for j in jobs], timeout=90)
    assert {n: s.exit_code for n, s in states.items()} == {j.name: 0 for j in jobs}, states
    node = {j.name: states[j.name].node for j in jobs}
    assert node == {
        "hf-racc-half-a-1": "acc-a100",
        "hf-racc-half-b-1": "acc-a100",
        "hf-racc-amd-1": "acc-amd",
        "hf-racc-amd2-1": "acc-amd",
        "hf-racc-mig-1": "acc-a100",
    }
    # the two halves of the one A100 ran at the same time, each seeing that GPU only
    a0, a1 = (int(_read(tmp_path / "a", t)[0]) for t in ("t0", "t1"))
    b0, b1 = (int(_read(tmp_path / "b", t)[0]) for t in ("t0", "t1"))
    assert a0 < b1 and b0 < a1, (a0, a1, b0, b1)
    for half in ("a", "b"):
        assert _read(tmp_path / half, "devs") == ["/dev/nvidia0", "/dev/nvidiactl"]
        assert _read(tmp_path / half, "env") == ["CUDA_VISIBLE_DEVICES=0"]
    for amd in ("amd", "amd2"):
        devs = _read(tmp_path / amd, "devs")
        assert devs[0] == "/dev/kfd" and len(devs) == 2 and devs[1] in ("/dev/dri/renderD128", "/dev/dri/renderD129")
        assert _read(tmp_path / amd, "env") == ["HIP_VISIBLE_DEVICES=0", "ROCR_VISIBLE_DEVICES=0"]
    assert _read(tmp_path / "mig", "devs") == []  # Ray gives a MIG step no whole GPU (see the README)
    backend.release([j.name for j in jobs])
