"""The CUDA driver's checkpoint interface (``checkpoint.cudadriver``) and the dump / restore
sequences on a container's CUDA processes (``checkpoint.cudaprocs``), against a fake
``libcuda.so.1`` built here from fakecuda.c with cc and loaded through ctypes at the same seam
as the real one (``HETFLOW_LIBCUDA``).  The fake keeps each pid's CUprocessState, refuses calls
out of the driver's order, logs every call and fails the one it is told to.  Nothing here has
run against a real driver: the GPU kit's ``checkpoint`` part does that."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from hetflow.errors import EngineError
from hetflow.execute.checkpoint.cudadriver import (
    CHECKPOINTED,
    RUNNING,
    CudaError,
    GpuPair,
    LockArgs,
    Pair,
    RestoreArgs,
    load_driver,
    uuid_bytes,
)
from hetflow.execute.checkpoint.cudaprocs import CudaProcesses, cuda_pids, gpu_pairs
from tests.unit.fakecuda import HAVE_CC, build_fake_libcuda

OLD = "GPU-00112233-4455-6677-8899-aabbccddeeff"
NEW = "GPU-ffeeddcc-bbaa-9988-7766-554433221100"

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler for the fake libcuda")
build = build_fake_libcuda


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake driver (a new copy per test: its process table starts empty); returns its log."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKECUDA_LOG", str(log))
    monkeypatch.setenv("HETFLOW_LIBCUDA", str(build(tmp_path)))
    return log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.is_file() else []


def procs(timeout: float = 30.0) -> CudaProcesses:
    support = load_driver()
    assert support.driver is not None, support.reason
    return CudaProcesses(support.driver, lock_timeout=timeout)


def test_struct_layouts_match_cuda_h() -> None:
    assert (ctypes.sizeof(LockArgs), ctypes.sizeof(RestoreArgs), ctypes.sizeof(GpuPair)) == (64, 64, 32)
    assert uuid_bytes(OLD) == bytes.fromhex("00112233445566778899aabbccddeeff")
    with pytest.raises(ValueError, match="not 16 bytes"):
        uuid_bytes("GPU-1234")


def test_periodic_dump_locks_checkpoints_then_restores_and_unlocks(fake: Path) -> None:
    p = procs(timeout=2.5)
    dumped = []
    with p.around_dump([101, 102], leave_running=True) as done:
        dumped.append(calls(fake)[-1])
        assert done.pids == [101, 102]
    assert dumped == ["102 cuCheckpointProcessCheckpoint"]  # both were checkpointed before the dump
    assert calls(fake) == [
        "101 cuCheckpointProcessGetState",
        "101 cuCheckpointProcessLock",
        "101 timeoutMs=2500",
        "101 cuCheckpointProcessCheckpoint",
        "102 cuCheckpointProcessGetState",
        "102 cuCheckpointProcessLock",
        "102 timeoutMs=2500",
        "102 cuCheckpointProcessCheckpoint",
        "101 cuCheckpointProcessRestore",
        "101 cuCheckpointProcessUnlock",
        "102 cuCheckpointProcessRestore",
        "102 cuCheckpointProcessUnlock",
    ]
    assert p.driver.state(101) == RUNNING


def test_stopping_dump_leaves_them_checkpointed_and_restore_remaps_the_gpu(fake: Path) -> None:
    p = procs()
    with p.around_dump([7], leave_running=False):
        pass
    assert p.driver.state(7) == CHECKPOINTED
    assert p.restored([7], [Pair(OLD, NEW)]) == []
    assert calls(fake)[-3:] == [
        "7 cuCheckpointProcessRestore",
        "7 pair 00112233445566778899aabbccddeeff->ffeeddccbbaa99887766554433221100",
        "7 cuCheckpointProcessUnlock",
    ]
    assert p.driver.state(7) == RUNNING


def test_a_process_without_cuda_context_is_skipped_not_failed(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKECUDA_NOCTX", ",5,")
    with procs().around_dump([5, 6], leave_running=True) as done:
        assert done.pids == [6]
        assert done.skipped == ["pid 5: no CUDA context (initialization error)"]
    assert "5 cuCheckpointProcessLock" not in calls(fake)


@pytest.mark.parametrize(
    ("call", "code", "message"),
    [
        ("cuCheckpointProcessLock", 909, "pid 9's CUDA work did not let the driver lock it within 1.5s"),
        (
            "cuCheckpointProcessLock",
            801,
            "cuCheckpointProcessLock(pid 9) failed: operation not supported (CUresult 801)",
        ),
        (
            "cuCheckpointProcessCheckpoint",
            2,
            "GPU checkpoint failed: cuCheckpointProcessCheckpoint(pid 9) failed: CUDA error 2",
        ),
    ],
    ids=["lock-timeout", "lock-unsupported", "checkpoint-fails"],
)
def test_a_failed_dump_puts_every_process_back(
    fake: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int, message: str
) -> None:
    p = procs(timeout=1.5)
    with p.around_dump([8], leave_running=True):
        pass  # 8 went through once: it is running again
    monkeypatch.setenv("FAKECUDA_FAIL", f"{call}:{code}@9")
    with pytest.raises(EngineError, match="the step runs on, not checkpointed") as err:
        p.suspend([3, 9])  # 3 is checkpointed, then 9 fails
    assert message in str(err.value)
    monkeypatch.delenv("FAKECUDA_FAIL")
    assert (p.driver.state(3), p.driver.state(9)) == (RUNNING, RUNNING)


def test_a_restore_that_fails_says_which_call(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = procs()
    with p.around_dump([4], leave_running=False):
        pass
    monkeypatch.setenv("FAKECUDA_FAIL", "cuCheckpointProcessRestore:801")
    with pytest.raises(
        EngineError, match=r"GPU restore failed: cuCheckpointProcessRestore\(pid 4\) failed: operation not supported"
    ):
        p.restored([4])


def test_a_restore_skips_processes_not_checkpointed(fake: Path) -> None:
    assert procs().restored([11]) == ["pid 11: CUDA state running, not checkpointed"]


def test_an_illegal_order_is_the_drivers_error(fake: Path) -> None:
    p = procs()
    with pytest.raises(CudaError, match="cannot be performed in the present state"):
        p.driver.unlock(12)


@pytest.mark.parametrize(
    ("old", "new", "refusal"),
    [
        (OLD, NEW, ""),
        (OLD, OLD, ""),
        (OLD, f"{NEW},{OLD}", "taken on 1 GPU(s), the new attempt has 2"),
        (OLD, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "taken on a NVIDIA H100 80GB HBM3 (GPU-0011"),
    ],
    ids=["same-model", "same-gpu", "count-differs", "model-differs"],
)
def test_gpu_pairs_refuse_another_model(old: str, new: str, refusal: str) -> None:
    models = {
        OLD: "NVIDIA H100 80GB HBM3",
        NEW: "NVIDIA H100 80GB HBM3",
        "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee": "NVIDIA A100-SXM4-40GB",
    }
    if not refusal:
        assert gpu_pairs(old, new, models.get) == [Pair(old, new)]
        return
    with pytest.raises(EngineError, match="GPU restore refused") as err:
        gpu_pairs(old, new, models.get)
    assert refusal in str(err.value)


def test_no_driver_and_a_driver_before_570_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETFLOW_LIBCUDA", str(tmp_path / "none.so"))
    assert "the CUDA driver library cannot be loaded" in load_driver().reason
    monkeypatch.setenv("HETFLOW_LIBCUDA", str(build(tmp_path, "-DNO_CHECKPOINT_API")))
    monkeypatch.setenv("FAKECUDA_VERSION", "12040")
    why = load_driver().reason
    assert why.startswith("the driver (CUDA 12.4) has no checkpoint API (cuCheckpointProcessGetState)")
    assert "driver 570" in why and "mode: app" in why


def test_cuda_pids_are_the_cgroups_processes_holding_nvidia_nodes(tmp_path: Path) -> None:
    root, proc = tmp_path / "cg", tmp_path / "proc"
    (root / "machine.slice" / "libpod-x" / "container").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("")
    (root / "machine.slice" / "libpod-x" / "cgroup.procs").write_text("10\n")
    (root / "machine.slice" / "libpod-x" / "container" / "cgroup.procs").write_text("11\n12\n")
    for pid, target in ((10, "/dev/null"), (11, "/dev/nvidia0"), (12, "/dev/nvidia-uvm")):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "3").symlink_to(target)
    assert cuda_pids("/machine.slice/libpod-x", root, proc) == [11, 12]
    assert cuda_pids("", root, proc) == []
