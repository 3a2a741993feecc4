"""GPU checkpoints inside the local backend's container checkpoints (``CriuPodman`` with
``checkpoint.cudasteps``): the CUDA calls of the fake libcuda and podman's commands in one
order, for a periodic dump, a stopping dump, a restore onto the same or another GPU, and a
CPU container (no driver call).  The engine is a fake at ``CliEngine``'s seam (``command``,
``prepare_cgroup``, ``follow``); the container's cgroup and /proc are folders made here.
Nothing here ran CRIU or a GPU: the GPU kit's ``checkpoint`` part does."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.local.criupodman import CriuPodman
from hetflow.execute.backends.local.podman import CliEngine
from hetflow.execute.checkpoint import CriuSupport, Restore
from hetflow.execute.checkpoint.cudadriver import load_driver
from hetflow.execute.checkpoint.cudasteps import CudaSteps
from hetflow.execute.engine import ContainerSpec, Mount
from tests.unit.fakecuda import HAVE_CC, build_fake_libcuda

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler for the fake libcuda")
OLD = "GPU-00112233-4455-6677-8899-aabbccddeeff"
SAME_MODEL = "GPU-ffeeddcc-bbaa-9988-7766-554433221100"
OTHER_MODEL = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
MODELS = {OLD: "NVIDIA H100 80GB HBM3", SAME_MODEL: "NVIDIA H100 80GB HBM3", OTHER_MODEL: "NVIDIA A100-SXM4-40GB"}


class FakePodman:
    """Answers the podman commands CriuPodman runs; each is logged where the fake driver logs."""

    name = "podman"

    def __init__(self, log: Path, cgroup: str) -> None:
        self.log, self.cgroup, self.ran = log, cgroup, []  # type: list[str]

    def command(self, args: list[str], *, timeout: float, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        self.ran.append(" ".join(args[:2]))
        with self.log.open("a") as f:
            f.write(f"podman {' '.join(args[:2])}\n")
        out = ""
        if args[:2] == ["container", "checkpoint"]:
            Path(args[args.index("--export") + 1]).write_bytes(b"image")
        if args[0] == "inspect":
            out = self.cgroup
        return subprocess.CompletedProcess(args, 0, out, "")

    def prepare_cgroup(self, name: str) -> str | None:
        return None

    def follow(self, name: str, labels: Mapping[str, str]) -> None:
        pass


def container(tmp: Path, procs: Mapping[int, str]) -> tuple[Path, Path, str]:
    """A cgroup folder with ``procs`` (pid -> the device its fd 3 points to) and their /proc."""
    root, proc, rel = tmp / "cg", tmp / "proc", "/machine.slice/libpod-c"
    (root / rel.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("")
    (root / rel.lstrip("/") / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    for pid, dev in procs.items():
        (proc / str(pid) / "fd").mkdir(parents=True, exist_ok=True)
        (proc / str(pid) / "fd" / "3").symlink_to(dev)
    return root, proc, rel


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKECUDA_LOG", str(log))
    lib = build_fake_libcuda(tmp_path)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    root, proc, rel = container(tmp_path, {41: "/dev/nvidia0", 42: "/dev/null"})
    cuda = CudaSteps(
        lambda: load_driver({"HETFLOW_LIBCUDA": str(lib)}), cgroups=root, proc=proc, dev=dev, models=lambda: MODELS
    )
    engine = FakePodman(log, rel)
    criu = CriuPodman(cast(CliEngine, engine), CriuSupport(True, "/usr/sbin/criu", "4.1.1", ""), cuda)
    return {"log": log, "criu": criu, "engine": engine, "cuda": cuda, "dev": dev, "tmp": tmp_path}


def lines(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if "GetState" not in ln and "timeoutMs" not in ln]


def test_a_periodic_dump_checkpoints_cuda_first_and_lets_it_run_on_after(world: dict[str, Any]) -> None:
    world["criu"].dump("hf-r-s-1", world["tmp"] / "1.tar", leave_running=True)
    assert lines(world["log"]) == [
        "podman inspect --format",
        "41 cuCheckpointProcessLock",
        "41 cuCheckpointProcessCheckpoint",
        "podman container checkpoint",
        "41 cuCheckpointProcessRestore",
        "41 cuCheckpointProcessUnlock",
    ]


def test_a_stopping_dump_leaves_the_cuda_state_checkpointed(world: dict[str, Any]) -> None:
    world["criu"].dump("hf-r-s-1", world["tmp"] / "1.tar", leave_running=False)
    assert lines(world["log"])[-2:] == ["41 cuCheckpointProcessCheckpoint", "podman container checkpoint"]
    assert world["cuda"].processes.driver.state(41) == 2  # CHECKPOINTED: CRIU ended it


def test_a_lock_timeout_fails_the_dump_before_podman_runs(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKECUDA_FAIL", "cuCheckpointProcessLock:909")
    with pytest.raises(EngineError, match="did not let the driver lock it within 30s"):
        world["criu"].dump("hf-r-s-1", world["tmp"] / "1.tar", leave_running=True)
    assert "container checkpoint" not in world["engine"].ran


def test_a_cpu_container_is_dumped_without_the_driver(world: dict[str, Any], tmp_path: Path) -> None:
    root, proc, rel = container(tmp_path / "cpu", {51: "/dev/null"})
    world["engine"].cgroup = rel
    world["criu"].cuda.cgroups, world["criu"].cuda.proc = root, proc
    world["criu"].dump("hf-r-c-1", tmp_path / "2.tar", leave_running=True)
    assert lines(world["log"]) == ["podman inspect --format", "podman container checkpoint"]
    assert "processes" not in vars(world["criu"].cuda)  # the driver was never loaded


def test_without_an_nvidia_driver_on_the_host_nothing_changes(world: dict[str, Any]) -> None:
    (world["dev"] / "nvidiactl").unlink()
    world["criu"].dump("hf-r-s-1", world["tmp"] / "1.tar", leave_running=True)
    assert lines(world["log"]) == ["podman container checkpoint"]  # not even the inspect


def image(path: Path, gpus: str) -> Restore:
    config = {"id": "a" * 64, "name": "hf-r-s-1", "labels": {}, "cgroupParent": ""}
    config["spec"] = {"process": {"env": ["PATH=/bin", f"HETFLOW_GPU_UUIDS={gpus}"]}, "mounts": []}
    with tarfile.open(path, "w") as tar:
        for name, data in (("config.dump", json.dumps(config)), ("spec.dump", "{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data.encode()))
    return Restore(str(path), str(path.parent / "out"), "/old/out", 1, 0.0)


def spec(tmp: Path, gpus: str) -> ContainerSpec:
    out = tmp / "staging"
    out.mkdir(exist_ok=True)
    env = {"HETFLOW_GPU_UUIDS": gpus} if gpus else {}
    return ContainerSpec("hf-r-s-2", "img", ("x",), "0:0", {}, env, mounts=(Mount(str(out), "/out"),))


def test_a_restore_puts_the_cuda_state_back_on_its_gpu(world: dict[str, Any]) -> None:
    tmp = world["tmp"]
    (tmp / "out").mkdir()
    world["criu"].dump("hf-r-s-1", tmp / "1.tar", leave_running=False)
    world["log"].write_text("")
    world["criu"].restore(image(tmp / "1.tar", OLD), spec(tmp, OLD))
    assert lines(world["log"]) == [
        "podman container restore",
        "podman inspect --format",
        "41 cuCheckpointProcessRestore",
        "41 cuCheckpointProcessUnlock",
    ]


@pytest.mark.parametrize(
    ("new", "said"),
    [
        (OTHER_MODEL, r"taken on a NVIDIA H100 80GB HBM3 .*, the new attempt has a NVIDIA A100-SXM4-40GB"),
        (SAME_MODEL, r"restores CUDA state only onto the GPU it was taken on \(moving the container's /dev/nvidiaN"),
        ("", "the checkpoint holds CUDA state and the new attempt has no GPU"),
    ],
    ids=["other-model", "other-gpu-same-model", "no-gpu"],
)
def test_a_restore_onto_another_gpu_is_refused_before_podman_runs(world: dict[str, Any], new: str, said: str) -> None:
    tmp = world["tmp"]
    with pytest.raises(EngineError, match=f"GPU restore refused: .*{said}"):
        world["criu"].restore(image(tmp / "1.tar", OLD), spec(tmp, new))
    assert world["engine"].ran == []
