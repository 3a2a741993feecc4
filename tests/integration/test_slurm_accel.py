"""Shares, MIG and other vendors on a real local Slurm (slurmctld + four slurmd, fake GPUs:
mknod'd device nodes, so this proves what Slurm allocates and what the container is given,
not GPU computation): two half-GPU time-slicing shares run at once on one GPU as gres/shard,
an MPS share takes gres/mps with its thread percentage, AMD and Intel jobs take their gres
types and see only their render nodes (+ /dev/kfd for AMD) and their vendor's variables;
two MIG steps at once each see only their own instance, by its UUID, as on this machine; an
AMD or Intel share takes one shard of its GPU and sees that GPU with its share."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from demo.images import build_tiny_image
from demo.slurm.cluster import FakeNode, LocalSlurm

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm import SlurmBackend
from hetflow.inventory import GpuSharing
from hetflow.spec import GpuRequest
from tests.contract.backend_contract import BUSYBOX, job, wait_done
from tests.integration.slurm_fixture import local_cluster

NODES = (
    FakeNode("hf-shard", "a100:1", shards=4),
    FakeNode("hf-mps", "t4:1", mps=100),
    FakeNode("hf-amd", drm="mi250x:2", drm_vendor="amd", shards=2),
    FakeNode("hf-intel", drm="max1550:1", drm_vendor="intel", shards=2),
    FakeNode("hf-mig", "a100-80g:1:mig=1g.10gb+1g.10gb"),
)
SEES = (
    "for d in /dev/nvidia* /dev/kfd /dev/dri/*; do [ -e $d ] && echo $d; done > /out/devs; "
    "env | grep -E '^(CUDA|NVIDIA|ROCR|HIP|ZE)_' | sort > /out/env; sleep {sleep}"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    with local_cluster(NODES, prefix="hfacc-") as c:
        yield c


def _job(name: str, out: Path, req: GpuRequest, *, model: str | None = None, sharing: GpuSharing | None = None) -> Job:
    j = job(name, out, SEES.format(sleep=3 if req.share else 0), run_id=name.split("-")[1], gpus=req.count)
    return replace(j, gpu_model=model, gpu_request=req, gpu_sharing=sharing)


def _scontrol(cluster: LocalSlurm, name: str) -> str:
    env = {**os.environ, **cluster.env}
    out = subprocess.run(["scontrol", "--oneliner", "show", "job"], env=env, capture_output=True, text=True).stdout
    (line,) = [x for x in out.splitlines() if f"JobName={name} " in x]
    return line


def test_shares_and_vendors_get_their_gres_and_only_their_devices(cluster: LocalSlurm, tmp_path: Path) -> None:
    build_tiny_image(BUSYBOX)
    backend = SlurmBackend(cluster.settings())
    backend.check()
    r = "acc1"
    ts = GpuSharing(mode="time-slicing", replicas=4)
    jobs = {
        "half-a": _job(f"hf-{r}-half-a-1", tmp_path / "ha", GpuRequest(share=0.5), sharing=ts),
        "half-b": _job(f"hf-{r}-half-b-1", tmp_path / "hb", GpuRequest(share=0.5), sharing=ts),
        "mps": _job(
            f"hf-{r}-mps-1", tmp_path / "mps", GpuRequest(share=0.25), sharing=GpuSharing(mode="mps", replicas=4)
        ),
        "amd": _job(f"hf-{r}-amd-1", tmp_path / "amd", GpuRequest(count=1, vendor="amd"), model="AMD Instinct MI250X"),
        "intel": _job(
            f"hf-{r}-intel-1",
            tmp_path / "intel",
            GpuRequest(count=1, vendor="intel"),
            model="Intel Data Center GPU Max 1550",
        ),
    }
    for j in jobs.values():
        backend.submit(j)
    names = [j.name for j in jobs.values()]
    states = wait_done(backend, r, names)
    assert {k: states[j.name].exit_code for k, j in jobs.items()} == dict.fromkeys(jobs, 0), states
    info = {k: _scontrol(cluster, j.name) for k, j in jobs.items()}
    assert "TresPerNode=gres:shard:2" in info["half-a"] and "NodeList=hf-shard " in info["half-a"]
    assert "TresPerNode=gres:mps:25" in info["mps"] and "NodeList=hf-mps " in info["mps"]
    assert "TresPerNode=gres:gpu:mi250x:1" in info["amd"] and "NodeList=hf-amd " in info["amd"]
    assert "TresPerNode=gres:gpu:max1550:1" in info["intel"] and "NodeList=hf-intel " in info["intel"]
    # two halves of one GPU (4 shards, 2 each) ran at the same time: their runs overlap
    a, b = (_times(info[k]) for k in ("half-a", "half-b"))
    assert a[0] < b[1] and b[0] < a[1], (a, b)

    def seen(key: str) -> tuple[list[str], list[str]]:
        out = tmp_path / {"half-a": "ha", "half-b": "hb"}.get(key, key)
        return (out / "devs").read_text().split(), (out / "env").read_text().split()

    for key in ("half-a", "half-b"):
        assert seen(key) == (["/dev/nvidia0", "/dev/nvidiactl"], ["CUDA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=0"])
    devs, env = seen("mps")
    assert devs == ["/dev/nvidia0", "/dev/nvidiactl"] and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env
    devs, env = seen("amd")
    assert len(devs) == 2 and devs[0] == "/dev/kfd" and devs[1] in ("/dev/dri/renderD128", "/dev/dri/renderD129")
    assert env == ["HIP_VISIBLE_DEVICES=0", "ROCR_VISIBLE_DEVICES=0"]
    assert seen("intel") == (["/dev/dri/renderD128"], ["ZE_AFFINITY_MASK=0"])
    backend.release(names)


def _times(line: str) -> tuple[str, str]:
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    return fields["StartTime"], fields["EndTime"]


# what a MIG or AMD/Intel share container sees: its device nodes (caps included) and the
# variables the local path sets (execute/devices/gpu.py)
SEES_ALL = (
    "for d in /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-caps/* /dev/kfd /dev/dri/*; do [ -e $d ] && echo $d; done"
    " > /out/devs; env | grep -E '^(CUDA|NVIDIA|ROCR|HIP|ZE|HETFLOW_GPU|HETFLOW_MIG)_' | sort > /out/env; sleep 3"
)


def test_mig_steps_see_their_instance_and_amd_intel_shares_their_gpu(cluster: LocalSlurm, tmp_path: Path) -> None:
    build_tiny_image(BUSYBOX)
    settings = cluster.settings()
    backend = SlurmBackend(settings)
    r = "acc2"

    def mk(key: str, req: GpuRequest, model: str | None = None, node: str | None = None) -> Job:
        j = job(f"hf-{r}-{key}-1", tmp_path / key, SEES_ALL, run_id=r, gpus=req.count)
        sharing = GpuSharing(mode="time-slicing", replicas=2)
        return replace(j, gpu_model=model, gpu_request=req, gpu_sharing=sharing, node=node)

    jobs = {
        "mig-a": mk("mig-a", GpuRequest(mig="1g.10gb")),
        "mig-b": mk("mig-b", GpuRequest(mig="1g.10gb")),
        # a share names no GPU type in Slurm (gres/shard has none): the plan's node pins it
        "amd-half": mk("amd-half", GpuRequest(share=0.5, vendor="amd"), "AMD Instinct MI250X", "hf-amd"),
        "intel-half": mk(
            "intel-half", GpuRequest(share=0.5, vendor="intel"), "Intel Data Center GPU Max 1550", "hf-intel"
        ),
    }
    for j in jobs.values():
        backend.submit(j)
    states = wait_done(backend, r, [j.name for j in jobs.values()])
    assert {k: states[j.name].exit_code for k, j in jobs.items()} == dict.fromkeys(jobs, 0), states

    def seen(key: str) -> tuple[list[str], dict[str, str]]:
        env = dict(line.split("=", 1) for line in (tmp_path / key / "env").read_text().split())
        return (tmp_path / key / "devs").read_text().split(), env

    table = {m.uuid: m for m in settings.mig_devices["hf-mig"]}
    uuids = set()
    for key in ("mig-a", "mig-b"):
        devs, env = seen(key)
        uuid = env["NVIDIA_VISIBLE_DEVICES"]
        assert uuid in table and env["CUDA_VISIBLE_DEVICES"] == env["HETFLOW_MIG_UUID"] == uuid, env
        assert env["HETFLOW_GPU_UUIDS"] == table[uuid].gpu_uuid
        caps = sorted(f"/dev/nvidia-caps/{Path(f).name}" for f in table[uuid].files[1:])
        assert devs == ["/dev/nvidia0", "/dev/nvidiactl", *caps], devs  # its own two caps only
        uuids.add(uuid)
    assert uuids == set(table)  # the two ran at once on the two instances
    devs, env = seen("amd-half")
    assert devs[0] == "/dev/kfd" and len(devs) == 2 and devs[1] in ("/dev/dri/renderD128", "/dev/dri/renderD129")
    assert env == {"HETFLOW_GPU_SHARE": "0.5", "HIP_VISIBLE_DEVICES": "0", "ROCR_VISIBLE_DEVICES": "0"}
    assert seen("intel-half") == (["/dev/dri/renderD128"], {"HETFLOW_GPU_SHARE": "0.5", "ZE_AFFINITY_MASK": "0"})
    assert "TresPerNode=gres:shard:1" in _scontrol(cluster, jobs["amd-half"].name)
    backend.release([j.name for j in jobs.values()])
