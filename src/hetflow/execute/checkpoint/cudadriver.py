"""The CUDA driver's checkpoint interface, through ctypes on ``libcuda.so.1`` (no extra binary).

From driver 570 (CUDA 12.8) the driver API has what NVIDIA's ``cuda-checkpoint`` utility
does, per process id (CUDA driver API reference, section "CUDA Checkpointing",
``group__CUDA__CHECKPOINT``; structs as in cuda.h of CUDA 13.0):

    cuCheckpointProcessGetState(int pid, CUprocessState *state)
    cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)        RUNNING -> LOCKED
    cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)  LOCKED -> CHECKPOINTED
    cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)  CHECKPOINTED -> LOCKED
    cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)    LOCKED -> RUNNING

A checkpoint moves the process's GPU memory into its host memory and drops every reference
to the device, after which CRIU dumps it like any other process; a restore puts it back on a
GPU, optionally another one of the same model (``gpuPairs``: old UUID -> new UUID).  CRIU's
own CUDA plugin (criu/plugins/cuda/cuda_plugin.c) drives the same four actions through the
utility in the same order: lock and checkpoint before the dump, restore and unlock after.

``HETFLOW_LIBCUDA`` names another library to load (tests load a fake built from
tests/unit/fakecuda.c at this seam).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LIBCUDA_ENV = "HETFLOW_LIBCUDA"
LIBCUDA = "libcuda.so.1"
MIN_DRIVER = 570  # the first driver with cuCheckpointProcess* in the driver API

# CUprocessState (cuda.h)
RUNNING, LOCKED, CHECKPOINTED, FAILED = 0, 1, 2, 3
STATE_NAMES = {RUNNING: "running", LOCKED: "locked", CHECKPOINTED: "checkpointed", FAILED: "failed"}
CUDA_ERROR_TIMEOUT = 909
CALLS = (
    "cuCheckpointProcessGetState",
    "cuCheckpointProcessLock",
    "cuCheckpointProcessCheckpoint",
    "cuCheckpointProcessRestore",
    "cuCheckpointProcessUnlock",
)


class LockArgs(ctypes.Structure):
    """CUcheckpointLockArgs: ``timeoutMs`` (0: wait for ever), the rest zeroed."""

    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


class CheckpointArgs(ctypes.Structure):
    """CUcheckpointCheckpointArgs (and CUcheckpointUnlockArgs): reserved, zeroed."""

    _fields_ = [("reserved", ctypes.c_uint64 * 8)]


class GpuPair(ctypes.Structure):
    """CUcheckpointGpuPair: the GPU the process was checkpointed on, the one to restore it on."""

    _fields_ = [("oldUuid", ctypes.c_ubyte * 16), ("newUuid", ctypes.c_ubyte * 16)]


class RestoreArgs(ctypes.Structure):
    """CUcheckpointRestoreArgs (CUDA 13.0): ``gpuPairs`` remaps GPUs; 64 bytes in all."""

    _fields_ = [
        ("gpuPairs", ctypes.POINTER(GpuPair)),
        ("gpuPairsCount", ctypes.c_uint),
        ("reserved", ctypes.c_char * (52 - ctypes.sizeof(ctypes.c_void_p))),
        ("reserved1", ctypes.c_uint64),
    ]


class CudaError(Exception):
    """A driver call that failed: which, for which process, the CUresult and the driver's words."""

    def __init__(self, call: str, pid: int, code: int, words: str) -> None:
        self.call, self.pid, self.code, self.words = call, pid, code, words
        super().__init__(f"{call}(pid {pid}) failed: {words} (CUresult {code})")


def uuid_bytes(uuid: str) -> bytes:
    """NVML's ``GPU-8e6c1b4a-...`` as the 16 bytes of a CUuuid."""
    hexits = uuid.removeprefix("GPU-").replace("-", "")
    raw = bytes.fromhex(hexits)
    if len(raw) != 16:
        raise ValueError(f"GPU UUID {uuid!r} is not 16 bytes")
    return raw


def _cuuuid(uuid: str) -> ctypes.Array[ctypes.c_ubyte]:
    return (ctypes.c_ubyte * 16)(*uuid_bytes(uuid))  # every byte, a NUL too (c_char would stop there)


@dataclass(frozen=True)
class Pair:
    old: str  # NVML UUIDs
    new: str


class CudaDriver:
    """The five checkpoint calls on one loaded driver library; each raises CudaError."""

    def __init__(self, lib: ctypes.CDLL, version: int) -> None:
        self.lib, self.version = lib, version  # version: cuDriverGetVersion's, 13000 for CUDA 13.0

    def words(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self.lib.cuGetErrorString(ctypes.c_int(code), ctypes.byref(text)) != 0 or not text.value:
            return f"CUDA error {code}"
        return text.value.decode(errors="replace")

    def _call(self, name: str, pid: int, arg: object) -> None:
        code = int(getattr(self.lib, name)(ctypes.c_int(pid), arg))
        if code != 0:
            raise CudaError(name, pid, code, self.words(code))

    def state(self, pid: int) -> int:
        out = ctypes.c_int(-1)
        self._call("cuCheckpointProcessGetState", pid, ctypes.byref(out))
        return out.value

    def lock(self, pid: int, timeout_ms: int) -> None:
        self._call("cuCheckpointProcessLock", pid, ctypes.byref(LockArgs(timeoutMs=timeout_ms)))

    def checkpoint(self, pid: int) -> None:
        self._call("cuCheckpointProcessCheckpoint", pid, ctypes.byref(CheckpointArgs()))

    def restore(self, pid: int, pairs: Sequence[Pair] = ()) -> None:
        """Back onto a GPU; ``pairs`` maps each GPU it had to the one it is to have now
        (none: the same GPUs).  A pair whose two sides are the same is left out."""
        moved = [p for p in pairs if p.old != p.new]
        if not moved:
            self._call("cuCheckpointProcessRestore", pid, None)
            return
        arr = (GpuPair * len(moved))(*(GpuPair(_cuuuid(p.old), _cuuuid(p.new)) for p in moved))
        args = RestoreArgs(gpuPairs=ctypes.cast(arr, ctypes.POINTER(GpuPair)), gpuPairsCount=len(moved))
        self._call("cuCheckpointProcessRestore", pid, ctypes.byref(args))

    def unlock(self, pid: int) -> None:
        self._call("cuCheckpointProcessUnlock", pid, ctypes.byref(CheckpointArgs()))


@dataclass(frozen=True)
class DriverSupport:
    """Whether this host's CUDA driver can checkpoint processes, and why not."""

    driver: CudaDriver | None
    reason: str  # empty when driver is set

    @property
    def ok(self) -> bool:
        return self.driver is not None


def _version(lib: ctypes.CDLL) -> int:
    v = ctypes.c_int(0)
    return v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else 0


def load_driver(env: Mapping[str, str] | None = None) -> DriverSupport:
    """``libcuda.so.1`` (or ``$HETFLOW_LIBCUDA``) loaded, initialised, with the checkpoint
    calls; else why not, in words for ``hetflow nodes`` and a refusal."""
    env = os.environ if env is None else env
    path = env.get(LIBCUDA_ENV) or LIBCUDA
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return DriverSupport(None, f"the CUDA driver library cannot be loaded ({path}: {exc})")
    version = _version(lib)
    missing = [c for c in CALLS if not hasattr(lib, c)]
    if missing:
        cuda = f"CUDA {version // 1000}.{version % 1000 // 10}" if version else "an unknown CUDA"
        return DriverSupport(
            None,
            f"the driver ({cuda}) has no checkpoint API ({missing[0]}): it came with driver {MIN_DRIVER}; "
            "update the driver, or use checkpoint: {mode: app}",
        )
    code = int(lib.cuInit(ctypes.c_uint(0)))
    if code != 0:
        return DriverSupport(None, f"cuInit failed: {CudaDriver(lib, version).words(code)} (CUresult {code})")
    return DriverSupport(CudaDriver(lib, version), "")
