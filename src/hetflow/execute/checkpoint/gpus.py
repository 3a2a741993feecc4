"""Whether a GPU step's CUDA state can be checkpointed here, known before the run starts.

A node can when its NVIDIA driver is 570 or later (the driver API's ``cuCheckpointProcess*``)
and ``libcuda.so.1`` loads with those calls (``cudadriver.load_driver``); ``hetflow nodes``
says so or why not.  A step cannot, on any node, when what it runs on is beyond what the
driver checkpoints: NVIDIA's cuda-checkpoint README ("Functionality", driver 570) says the
driver does not checkpoint UVM or IPC memory, which an MPS client (its memory is the MPS
server's) and a gang's ranks (NCCL's peer memory) use; a MIG instance is not named there and
has not been tried, so hetflow does not offer it.  Those steps use ``checkpoint: {mode: app}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from hetflow.execute.checkpoint.cudadriver import MIN_DRIVER, DriverSupport, load_driver
from hetflow.inventory import Node
from hetflow.spec import GpuRequest

APP = "write checkpoint: {mode: app} (the step saves its own state under $HETFLOW_CHECKPOINT_DIR)"


@dataclass(frozen=True)
class GpuCheckpointSupport:
    ok: bool
    driver: str  # the NVIDIA driver's version, as NVML says ("" unknown)
    reason: str  # why not (empty when ok)

    def describe(self) -> str:
        return f"yes (driver {self.driver}, CUDA checkpoint API)" if self.ok else f"no: {self.reason}"


def _major(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def gpu_checkpoint_support(
    node: Node, env: Mapping[str, str] | None = None, *, load: Callable[..., DriverSupport] = load_driver
) -> GpuCheckpointSupport:
    """Whether this node's NVIDIA GPUs can have their processes' CUDA state checkpointed."""
    nvidia = [g for g in node.gpus if g.vendor == "nvidia"]
    if not nvidia:
        return GpuCheckpointSupport(False, "", "no NVIDIA GPU here")
    driver = nvidia[0].driver_version
    if any(g.fake for g in nvidia):
        return GpuCheckpointSupport(False, driver, "the GPUs are fake (HETFLOW_FAKE_GPUS): no CUDA driver")
    major = _major(driver)
    if major is not None and major < MIN_DRIVER:
        return GpuCheckpointSupport(
            False, driver, f"driver {driver} has no CUDA checkpoint API (it came with driver {MIN_DRIVER})"
        )
    found = load(env)
    if not found.ok:
        return GpuCheckpointSupport(False, driver, found.reason)
    return GpuCheckpointSupport(True, driver, "")


def step_refusal(request: GpuRequest, sharing_mode: str, *, gang: bool) -> str:
    """Why CRIU plus the CUDA driver cannot checkpoint a step with this GPU request ("" if they can)."""
    if gang:
        return "a gang's ranks share GPU memory with each other (NCCL), which the driver cannot checkpoint"
    if request.mig is not None:
        return f"it runs on a MIG instance ({request.mig}); GPU checkpoints of MIG instances are not supported"
    if request.share is not None and sharing_mode == "mps":
        return "it is an MPS client (its GPU memory is the MPS server's), which the driver cannot checkpoint"
    return ""


def gpu_step_problem(requests: Sequence[GpuRequest], node: Node, support: GpuCheckpointSupport, *, gang: bool) -> str:
    """What is wrong with ``checkpoint:`` (CRIU) on a step whose variants ask for ``requests``
    on ``node`` ("" when nothing: the step is checkpointed with its CUDA state)."""
    wanted = [r for r in requests if r.any]
    if not wanted:
        return ""
    for r in wanted:
        why = step_refusal(r, node.gpu_sharing.mode, gang=gang)
        if why:
            return f"GPU checkpoints cannot dump this step: {why}; {APP}"
    if not support.ok:
        return f"GPU checkpoints do not work here: {support.reason}; {APP}"
    return ""
