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
from hetflow.execute.gang.replicas import replica_name
from hetflow.spec import Gang, GpuRequest
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
    # a MIG step gets its instance (test below), no whole GPU: no CUDA index
    assert "/dev/nvidia0" in _read(tmp_path / "mig", "devs") and _read(tmp_path / "mig", "env")[0].startswith(
        "CUDA_VISIBLE_DEVICES=MIG-"
    )
    backend.release([j.name for j in jobs])


# a MIG or share container: its device nodes (caps included) and the variables the local
# path sets (execute/devices/gpu.py)
SEE_ALL = (
    "for d in /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-caps/* /dev/kfd /dev/dri/*; do [ -e $d ] && echo $d; done"
    " > /out/devs; env | grep -E '^(CUDA|NVIDIA|ROCR|HIP|ZE|HETFLOW_GPU|HETFLOW_MIG)_' | sort > /out/env; sleep 3"
)


def test_mig_steps_see_their_own_instance_and_an_amd_share_its_gpu(ray_acc_cluster: RayCluster, tmp_path: Path) -> None:
    settings = ray_acc_cluster.settings()
    backend = RayBackend(settings)
    backend.check()

    def mk(key: str, req: GpuRequest, model: str | None = None) -> Job:
        return replace(
            job(f"hf-racc2-{key}-1", tmp_path / key, SEE_ALL, run_id="racc2"), gpu_model=model, gpu_request=req
        )

    jobs = [
        mk("mig-a", GpuRequest(mig="1g.10gb")),
        mk("mig-b", GpuRequest(mig="1g.10gb")),
        mk("amd-half", GpuRequest(share=0.5, vendor="amd"), "AMD Instinct MI250X"),
    ]
    for j in jobs:
        backend.submit(j)
    states = wait_done(backend, "racc2", [j.name for j in jobs], timeout=90)
    assert {n: s.exit_code for n, s in states.items()} == {j.name: 0 for j in jobs}, states

    def seen(key: str) -> tuple[list[str], dict[str, str]]:
        return _read(tmp_path / key, "devs"), dict(x.split("=", 1) for x in _read(tmp_path / key, "env"))

    table = {m.uuid: m for m in settings.mig_devices["acc-a100"]}
    uuids = set()
    for key in ("mig-a", "mig-b"):
        devs, env = seen(key)
        uuid = env["NVIDIA_VISIBLE_DEVICES"]
        assert uuid in table and env["CUDA_VISIBLE_DEVICES"] == env["HETFLOW_MIG_UUID"] == uuid, env
        assert env["HETFLOW_GPU_UUIDS"] == table[uuid].gpu_uuid and "HETFLOW_MIG_PROFILE" not in env
        caps = sorted(f"/dev/nvidia-caps/{Path(f).name}" for f in table[uuid].files[1:])
        assert devs == ["/dev/nvidia0", "/dev/nvidiactl", *caps], devs  # only its own two caps
        uuids.add(uuid)
    assert uuids == set(table)  # the two ran at once, each on its own instance
    devs, env = seen("amd-half")
    assert devs[0] == "/dev/kfd" and len(devs) == 2 and devs[1] in ("/dev/dri/renderD128", "/dev/dri/renderD129")
    assert env == {
        "HETFLOW_GPU_SHARE": "0.5",
        "HIP_VISIBLE_DEVICES": "0",
        "ROCR_VISIBLE_DEVICES": "0",
    }
    backend.release([j.name for j in jobs])


def test_an_amd_gangs_replicas_each_see_their_own_render_node(ray_acc_cluster: RayCluster, tmp_path: Path) -> None:
    # two replicas packed on the MI250X node, one GPU each: AMD's device nodes, not nvidiaN
    backend = RayBackend(ray_acc_cluster.settings())
    name = "hf-racc3-gang-1"
    see = "for d in /dev/nvidia[0-9]* /dev/kfd /dev/dri/*; do [ -e $d ] && echo $d; done > /out/devs; sleep 2"
    ranks = tuple(
        replace(job(replica_name(name, i), tmp_path / f"r{i}", see, run_id="racc3").container, network_name="host")
        for i in range(2)
    )
    lead = job(name, tmp_path / "r0", see, run_id="racc3", gpus=1)
    gang = replace(
        lead,
        container=ranks[0],
        ranks=ranks,
        gang=Gang(replicas=2, port=29795),
        gpu_model="AMD Instinct MI250X",
        gpu_request=GpuRequest(count=1, vendor="amd"),
    )
    backend.submit(gang)
    st = wait_done(backend, "racc3", [name], timeout=90)[name]
    assert st.exit_code == 0, st
    seen = [_read(tmp_path / f"r{i}", "devs") for i in range(2)]
    assert all(d[0] == "/dev/kfd" and len(d) == 2 and d[1].startswith("/dev/dri/renderD") for d in seen), seen
    assert seen[0][1] != seen[1][1]  # each its own GPU
    backend.release([name])
