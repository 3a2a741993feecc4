"""Checkpoints: what of a running step survives a stop, a crash, a lost node or a move.

``criu`` finds a CRIU that works on this kernel (``make criu`` builds one) and says why not;
``images`` keeps each attempt's last good CRIU image (and the outputs as they were at that
moment: ``freeze`` copies /out while the container is frozen for a periodic dump) in the
run's folder; ``gpus`` says whether a GPU step's CUDA state can be checkpointed here
(``cudadriver``: the driver's checkpoint calls through ctypes; ``cudaprocs``: a container's CUDA
processes around a dump and a restore); ``archive`` readies an image for a new attempt (its name, ID,
labels, cgroup and output folder); ``app`` is ``checkpoint: {mode: app}`` (the folder a step saves
to, SIGUSR1 on its schedule); ``schedule`` takes a step's periodic checkpoints off the runner's path.

Names load on first use (as in ``hetflow.execute``): ``hetflow show`` lists a run's kept
checkpoints without loading the engine or the workflow models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.checkpoint.criu import CRIU_ENV, CriuSupport, criu_support, find_criu
    from hetflow.execute.checkpoint.gpus import GpuCheckpointSupport, gpu_checkpoint_support, gpu_step_problem
    from hetflow.execute.checkpoint.images import CheckpointImages, Restore, Saved, kept_checkpoints, write_json
    from hetflow.execute.checkpoint.schedule import Checkpointer

_WHERE = {
    "criu": ["CRIU_ENV", "CriuSupport", "criu_support", "find_criu"],
    "gpus": ["GpuCheckpointSupport", "gpu_checkpoint_support", "gpu_step_problem"],
    "images": ["CheckpointImages", "Restore", "Saved", "kept_checkpoints", "write_json"],
    "schedule": ["Checkpointer"],
}
__all__ = [
    "CRIU_ENV",
    "CheckpointImages",
    "Checkpointer",
    "CriuSupport",
    "GpuCheckpointSupport",
    "Restore",
    "Saved",
    "criu_support",
    "find_criu",
    "gpu_checkpoint_support",
    "gpu_step_problem",
    "kept_checkpoints",
    "write_json",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)

# Dumping and restoring through podman is the local backend's: backends.local.criupodman.
