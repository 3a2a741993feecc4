"""Slurm's translation of a step's accelerator request: gres for whole AMD/Intel GPUs,
shard and mps gres for a share, MIG profiles as gres types, and the job script's device
block run in bash over fake device nodes (mknod'd here; no GPU, no driver behind them)."""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.errors import UsageError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm import SlurmSettings, sbatch_args
from hetflow.execute.backends.slurm.gres import gpu_vendor, gres_args, mps_env, share_env
from hetflow.execute.backends.slurm.script.devices import gpu_devices, mig_devices
from hetflow.execute.devices.migtable import MigInstance, parse_mig_devices
from hetflow.inventory import GpuSharing
from hetflow.spec import GpuRequest
from tests.unit.builders import gpu_job

TIMESLICE4 = GpuSharing(mode="time-slicing", replicas=4)
TIMESLICE8 = GpuSharing(mode="time-slicing", replicas=8)
MPS = GpuSharing(mode="mps", replicas=4, mps_memory_limit=10 * 2**30)


def _gres(job: Job, **settings: object) -> list[str]:
    return [
        a for a in sbatch_args(job, SlurmSettings(**settings), [], Path("/w")) if a.startswith(("--gres", "--gpus"))
    ]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("req", "model", "want"),
    [
        (GpuRequest(count=2), "NVIDIA A100-SXM4-40GB", ["--gres=gpu:a100:2"]),
        (GpuRequest(count=1, vendor="amd"), "AMD Instinct MI250X", ["--gres=gpu:mi250x:1"]),
        (GpuRequest(count=2, vendor="intel"), "Intel Data Center GPU Max 1550", ["--gres=gpu:max1550:2"]),
        (GpuRequest(count=1, vendor="any"), None, ["--gpus=1"]),
        (GpuRequest(mig="1g.10gb"), "NVIDIA A100-SXM4-80GB", ["--gres=gpu:1g.10gb:1"]),
        (None, None, []),
    ],
)
def test_whole_gpus_and_mig_instances_are_typed_gpu_gres(
    req: GpuRequest | None, model: str | None, want: list[str]
) -> None:
    assert _gres(gpu_job(req, model=model)) == want


def test_a_mig_profile_can_be_mapped_to_the_sites_gres_type() -> None:
    job = gpu_job(GpuRequest(mig="3g.40gb"))
    assert _gres(job, gres_types={"3g.40gb": "a100_3g.40gb"}) == ["--gres=gpu:a100_3g.40gb:1"]


@pytest.mark.parametrize(
    ("share", "sharing", "want"),
    [
        (0.25, TIMESLICE4, "--gres=shard:1"),  # a quarter of a GPU split four ways
        (0.3, TIMESLICE4, "--gres=shard:2"),  # rounded up: never less than asked
        (0.25, TIMESLICE8, "--gres=shard:2"),
        (0.01, TIMESLICE8, "--gres=shard:1"),  # at least one shard
        (0.25, MPS, "--gres=mps:25"),  # 100 mps per GPU: a percentage
        (0.333, MPS, "--gres=mps:34"),
    ],
)
def test_a_share_asks_for_shards_or_mps_by_the_nodes_sharing(share: float, sharing: GpuSharing, want: str) -> None:
    assert _gres(gpu_job(GpuRequest(share=share), sharing=sharing)) == [want]


def test_without_the_plans_sharing_the_settings_decide() -> None:
    job = gpu_job(GpuRequest(share=0.5))
    assert _gres(job) == ["--gres=shard:2"]  # 4 shards per GPU by default
    assert _gres(job, shards_per_gpu=10) == ["--gres=shard:5"]
    assert _gres(job, share_gres="mps") == ["--gres=mps:50"]
    assert SlurmSettings.from_mapping({"share_gres": "mps", "shards_per_gpu": 8}).share_gres == "mps"
    with pytest.raises(UsageError, match="share_gres is 'slices'; give shard"):
        SlurmSettings.from_mapping({"share_gres": "slices"})
    with pytest.raises(UsageError, match="shards_per_gpu is '0'"):
        SlurmSettings.from_mapping({"shards_per_gpu": 0})


def test_mps_limits_go_to_the_container_of_an_mps_share_only() -> None:
    s = SlurmSettings()
    assert mps_env(gpu_job(GpuRequest(share=0.25), sharing=MPS), s) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M",
    }
    assert mps_env(gpu_job(GpuRequest(share=0.25), sharing=TIMESLICE4), s) == {}
    assert mps_env(gpu_job(GpuRequest(count=1)), SlurmSettings(share_gres="mps")) == {}
    assert gpu_vendor(gpu_job(GpuRequest(count=1, vendor="any"))) == "nvidia"
    assert gpu_vendor(gpu_job(GpuRequest(count=1, vendor="amd"))) == "amd"


# --- the script's device block, run in bash over fake device nodes -----------------------


def _node(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


@pytest.fixture
def devdir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.fail("these tests mknod fake device nodes: run them as root")
    d = tmp_path / "dev"
    for i in range(2):
        _node(d / f"nvidia{i}", 195, i)
        _node(d / "dri" / f"renderD{128 + i}", 226, 128 + i)
    _node(d / "nvidiactl", 195, 255)
    _node(d / "kfd", 238, 0)
    return d


def _podman_args(devdir: Path, given: str, vendor: str, env: dict[str, str] | None = None) -> list[str]:
    block = gpu_devices(SlurmSettings(), "fail", vendor, env)
    script = (
        f'set -u\ndevdir={devdir}\nnode=n1\ncri() {{ echo "$*" >&2; }}\nfail() {{ exit "$1"; }}\n'
        f'gpu=()\nIFS=, read -r -a given <<< "{given}"\n{block}printf "%s\\n" "${{gpu[@]}}"\n'
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_an_amd_job_sees_only_its_render_node_and_kfd(devdir: Path) -> None:
    args = _podman_args(devdir, "1", "amd")
    assert _pairs(args, "--device") == [f"{devdir}/dri/renderD129:/dev/dri/renderD129", f"{devdir}/kfd:/dev/kfd"]
    assert _pairs(args, "--env") == ["ROCR_VISIBLE_DEVICES=0", "HIP_VISIBLE_DEVICES=0", "HETFLOW_SLURM_GPUS=1"]


def test_an_intel_job_sees_only_its_render_nodes(devdir: Path) -> None:
    args = _podman_args(devdir, "0,1", "intel")
    assert _pairs(args, "--device") == [
        f"{devdir}/dri/renderD128:/dev/dri/renderD128",
        f"{devdir}/dri/renderD129:/dev/dri/renderD129",
    ]
    assert _pairs(args, "--env") == ["ZE_AFFINITY_MASK=0,1", "HETFLOW_SLURM_GPUS=0,1"]


def test_an_mps_share_gets_its_one_gpu_and_its_thread_percentage(devdir: Path) -> None:
    args = _podman_args(devdir, "1", "nvidia", {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"})
    assert _pairs(args, "--device") == [f"{devdir}/nvidia1:/dev/nvidia1", f"{devdir}/nvidiactl:/dev/nvidiactl"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in _pairs(args, "--env")
    assert "CUDA_VISIBLE_DEVICES=0" in _pairs(args, "--env")


def test_a_share_job_reads_its_gpu_from_gpu_device_ordinal() -> None:
    # Slurm 22.05 gives a shard job no SLURM_JOB_GPUS, only GPU_DEVICE_ORDINAL (checked on
    # the test cluster: tests/integration/test_slurm_accel.py)
    from hetflow.execute.backends.slurm import job_script

    shared = job_script(gpu_job(GpuRequest(share=0.5)), SlurmSettings(), Path("/w"), "c", "h")
    whole = job_script(gpu_job(GpuRequest(count=1)), SlurmSettings(), Path("/w"), "c", "h")
    assert 'slurm_gpus="${SLURM_JOB_GPUS:-${GPU_DEVICE_ORDINAL:-}}"' in shared
    assert 'slurm_gpus="${SLURM_JOB_GPUS:-}"' in whole


def test_gres_args_for_a_cpu_job_are_empty() -> None:
    assert gres_args(gpu_job(None), SlurmSettings()) == []


def _mig_run(devdir: Path, given: str, cuda: str = "") -> subprocess.CompletedProcess[str]:
    caps = devdir / "nvidia-caps"
    for minor in (21, 22, 30, 31):
        _node(caps / f"nvidia-cap{minor}", 236, minor)
    table = [
        MigInstance(
            "MIG-a", "1g.10gb", (f"{devdir}/nvidia0", f"{caps}/nvidia-cap21", f"{caps}/nvidia-cap22"), "GPU-0", 0
        ),
        MigInstance(
            "MIG-b", "1g.10gb", (f"{devdir}/nvidia0", f"{caps}/nvidia-cap30", f"{caps}/nvidia-cap31"), "GPU-0", 1
        ),
    ]
    block = mig_devices(SlurmSettings(mig_devices={"n1": tuple(table)}), "fail")
    script = (
        f'set -u\ndevdir={devdir}\nnode=n1\ncri() {{ echo "$*" >&2; }}\nfail() {{ exit "$1"; }}\n'
        f'CUDA_VISIBLE_DEVICES="{cuda}"\ngpu=()\nIFS=, read -r -a given <<< "{given}"\n'
        f'{block}printf "%s\\n" "${{gpu[@]}}"\n'
    )
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("given", "cuda", "uuid", "caps"),
    [
        ("1", "", "MIG-b", (30, 31)),  # a static gres.conf: by Slurm's gres index
        ("0", "MIG-b", "MIG-b", (30, 31)),  # AutoDetect=nvml: Slurm's own UUID wins
        ("0", "0", "MIG-a", (21, 22)),
    ],
    ids=["by-index", "by-slurm-uuid", "index-0"],
)
def test_a_mig_job_gets_its_instance_by_slurms_index_or_uuid(
    devdir: Path, given: str, cuda: str, uuid: str, caps: tuple[int, int]
) -> None:
    proc = _mig_run(devdir, given, cuda)
    assert proc.returncode == 0, proc.stderr
    args = proc.stdout.splitlines()
    assert _pairs(args, "--device") == [
        f"{devdir}/nvidia0:/dev/nvidia0",
        *(f"{devdir}/nvidia-caps/nvidia-cap{c}:/dev/nvidia-caps/nvidia-cap{c}" for c in caps),
        f"{devdir}/nvidiactl:/dev/nvidiactl",
    ]
    env = _pairs(args, "--env")
    assert f"NVIDIA_VISIBLE_DEVICES={uuid}" in env and f"CUDA_VISIBLE_DEVICES={uuid}" in env
    assert f"HETFLOW_MIG_UUID={uuid}" in env and "HETFLOW_GPU_UUIDS=GPU-0" in env


def test_a_mig_index_the_table_lacks_fails_naming_the_setting(devdir: Path) -> None:
    proc = _mig_run(devdir, "5")
    assert proc.returncode == 125 and "slurm.mig_devices lists no such instance of n1" in proc.stderr


def test_shares_are_told_their_share_as_locally() -> None:
    ts = GpuSharing(mode="time-slicing", replicas=4)
    amd = gpu_job(GpuRequest(share=0.5, vendor="amd"), "AMD Instinct MI250X")
    assert share_env(amd, SlurmSettings()) == {"HETFLOW_GPU_SHARE": "0.5"}
    nv = replace(gpu_job(GpuRequest(share=0.25)), gpu_sharing=ts)
    assert share_env(nv, SlurmSettings()) == {"HETFLOW_GPU_SHARE": "0.25", "HETFLOW_GPU_SHARING": "time-slicing"}
    assert share_env(gpu_job(GpuRequest(count=1)), SlurmSettings()) == {}
    mig = parse_mig_devices({"n": [{"uuid": "MIG-x", "profile": "1g.10gb", "files": ["/d/nvidia0", "/d/c1"]}]}, "s")
    assert mig["n"][0].index == 0 and mig["n"][0].files == ("/d/nvidia0", "/d/c1")
    with pytest.raises(UsageError, match=r"slurm.mig_devices.n\[0\] is .*give \{uuid: MIG-"):
        SlurmSettings.from_mapping({"mig_devices": {"n": [{"uuid": "MIG-x"}]}})
