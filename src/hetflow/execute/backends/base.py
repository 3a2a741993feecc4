"""The backend contract (after snakemake's executor plugins): a small class with submit,
poll, cancel and release, a capabilities record and a settings dataclass.

hetflow plans and records; a backend only runs step attempts.  Every attempt has a
deterministic name (``hf-RUN-STEP-ATTEMPT``), so ``poll`` after a crash finds (adopts)
what is still running and what finished meanwhile: adoption is polling by name.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.checkpoint.images import Restore
from hetflow.execute.engine import ContainerSpec, Usage
from hetflow.inventory import GpuSharing
from hetflow.spec import Gang, GpuRequest

# A job given ``Job.publish`` ends with this code when it exited 0 but left a declared output
# out of /out (or could not move /out into place): not 0, so the engine never starts its
# dependants; the executor reports it as local does ("exited 0 but did not write ...") when a
# declared output is indeed missing from /out (a container that exits 120 itself and leaves one
# out reads the same), else as the exit code it is, the job's log saying why.
PUBLISH_FAILED_CODE = 120
# A job given ``Job.publish`` whose step's fencing token named another attempt when it came to
# move its outputs (``execute.data.fencing``: hetflow had given it up, lost with its node, and
# accepted a later attempt) ends with this code, its outputs left in its own folder, discarded.
DISCARDED_CODE = 122


@dataclass(frozen=True)
class Publish:
    """The job puts its own outputs in place before it ends 0 (a backend that holds
    dependencies: Slurm starts a dependant as soon as its parent's job ends, before the
    executor has seen that end, issue 30).  Every name in ``declared`` must exist under
    ``staging`` (the attempt's /out; a gang's rank 0); then ``staging`` is renamed to
    ``final`` (the step's outputs, which dependants mount) on its file system, an old
    ``final`` moved aside first and removed after, as ``execute.data.outputs.accept_outputs``
    does, and only while the step's fencing token (``execute.data.fencing``, beside ``final``)
    names the job's attempt, checked under the step's lock with the rename; else the job ends
    ``DISCARDED_CODE``.  The executor then only verifies and hashes what is in ``final``."""

    staging: str
    final: str
    declared: tuple[str, ...] = ()


@dataclass(frozen=True)
class Job:
    """One step attempt for a backend to run."""

    name: str  # deterministic: hf-RUN-STEP-ATTEMPT
    run_id: str
    step: str
    attempt: int
    container: ContainerSpec  # image, command, user, env, mounts, hardening; devices for local GPUs
    cpus: float
    memory: int  # bytes
    gpus: int = 0
    gpu_model: str | None = None  # a plan's GPU model (Slurm gres type, Ray custom resource)
    # The planned class's GPU vendor (None: a class without GPUs, or not known): whose device
    # plugin a ``vendor: any`` request asks (Kubernetes ``amd.com/gpu``), whose taint a pod tolerates.
    gpu_vendor: str | None = None
    node: str | None = None  # the plan pins this node (Slurm --nodelist, Ray NodeAffinity)
    node_class: str | None = None  # the plan's node type (Slurm constraint, Ray custom resource)
    depends_on: tuple[str, ...] = ()  # names of jobs that must succeed first (holds_dependencies)
    # A gang (``execute.gang.replicas``): every replica's container, rank 0 (``container``) first; the
    # backend starts all of them together or none, and reports them as this one job.  For a
    # backend that assigns GPUs (a cluster engine), they are templates on the host network
    # with no GPUs and no launch contract: the backend adds both where each replica lands
    # (``execute.gang.replicas.replica_env``) and fills an MPI gang's placeholder hosts
    # (``execute.gang.mpilaunch.resolve_hosts``).
    ranks: tuple[ContainerSpec, ...] = ()
    # The gang a cluster backend must start as one job (Slurm: srun over N tasks; Ray: a
    # placement group); None for a step of one container.
    gang: Gang | None = None
    nodes: int = 1  # a gang: the nodes the plan spreads it over (Slurm --nodes)
    # The step's accelerator request (vendor, a share of one GPU, a MIG instance): what a
    # cluster engine is asked for beyond ``gpus`` (Slurm shard/mps/MIG gres, Ray fractional
    # num_gpus and vendor/MIG resources).  None: ``gpus`` whole NVIDIA GPUs (or none).
    gpu_request: GpuRequest | None = None
    # How the planned node class shares its GPUs (time-slicing or MPS for a share); None:
    # unknown, the backend's settings decide (Slurm ``share_gres``).
    gpu_sharing: GpuSharing | None = None
    # Where the job moves its outputs before it ends 0 (``Publish``); None: the executor moves
    # them when it sees the job end (a backend that does not hold dependencies).
    publish: Publish | None = None
    # Start the attempt from this checkpoint of an earlier one (``checkpoint:``), not from zero;
    # a backend that cannot (``Checkpoints``) starts it afresh.
    restore: Restore | None = None


@dataclass(frozen=True)
class JobState:
    name: str
    running: bool  # queued or running: not finished
    exit_code: int | None  # when finished
    status: str  # the engine's word: PENDING, RUNNING, COMPLETED, exited, ...
    node: str | None = None  # where it ran, when known
    # the GPUs the engine assigned, when it says: indices on the node (Ray's, a DRA device's
    # index), else its own names for them (a device plugin's IDs, or "2x nvidia.com/gpu")
    gpus: tuple[int | str, ...] = ()
    reason: str = ""  # why pending or failed, in the engine's words
    # The engine dropped the job because a dependency failed (Slurm DependencyNeverSatisfied
    # with --kill-on-invalid-dep): not the step's failure; hetflow submits it again later.
    dependency_failed: bool = False
    # The job ended because its node did (Slurm NODE_FAIL or BOOT_FAIL, a Ray node that
    # died) or the engine preempted it: not the step's failure; hetflow runs it again as a
    # new attempt, outside the step's retries up to ``attempts.NODE_FAULT_REQUEUES`` times.
    node_failed: bool = False
    # The job ended because hetflow dumped its container with CRIU and stopped it (``Checkpoints``,
    # leave_running False): not the step's failure; hetflow requeues it, the next attempt restored.
    checkpointed: bool = False
    # The job's container was made but never started (its ``podman run`` killed mid-create): not
    # the step's failure; hetflow runs it again as a new attempt, outside the step's retries.
    never_started: bool = False
    # The engine refused the job when it was created, after ``submit`` had returned (Kubernetes
    # creates on client threads): the attempt fails with ``reason`` as a ``submit`` that raised.
    refused: bool = False
    # When the engine started and ended the job (epoch seconds), from its own record (Slurm's
    # StartTime/EndTime, the Ray task's start and end on its node); None: not started or
    # ended yet, or the engine does not say (then the executor's clock is used).
    started: float | None = None
    ended: float | None = None
    # The engine's own id of the job, as its tools name it (Nextflow's trace calls it native_id):
    # Slurm's job id (squeue, sacct), the Ray task's id, the Kubernetes Job's name; "" unknown.
    native_id: str = ""


class Backend(Protocol):
    capabilities: Capabilities

    def check(self) -> None:
        """Raise a HetflowError saying what to fix when the engine cannot be reached."""

    def image_exists(self, image: str) -> bool: ...

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """The image's ENTRYPOINT, () for none, where the engine can say before the run (the
        local one: podman's image inspect); None where it cannot (a cluster's nodes hold the
        images).  Fan-out items are batched, unasked, only into images with none."""

    def image_id(self, image: str) -> str | None:
        """The identity of the image the engine would run (its ID or pinned digest: a
        rebuild under the same tag changes it), or None when it cannot be known (the
        step's result is then not cached)."""

    def submit(self, job: Job) -> None:
        """Start or queue the job; HetflowError when the engine refuses it (or, where the
        engine is asked after this returns, a later ``poll``'s state with ``refused``)."""

    def poll(self, run_id: str) -> dict[str, JobState]:
        """Every job of the run the engine knows, by name (adoption after a crash)."""

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        """Stop the jobs: SIGTERM, then SIGKILL once ``grace`` seconds have passed (0: at
        once); None: the engine's own default (podman's 10 s, Slurm's KillWait)."""

    def release(self, names: Iterable[str]) -> None:
        """Forget finished jobs whose results are stored (podman rm; nothing for Slurm)."""

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``wake`` when a job of the run ends; None when the backend cannot (poll)."""


@runtime_checkable
class MeasuresUsage(Protocol):
    """A backend (or container engine) that can say what a finished job used: podman reads
    the job's cgroup; a Slurm job script and a Ray task read their container's cgroup the
    same way on the node (the figures they could not read stay unknown, NULL)."""

    def usage(self, name: str) -> Usage:
        """Peak memory, CPU time, image and run times of a finished job, before ``release``."""


@runtime_checkable
class MeasuresOnRelease(Protocol):
    """A backend that reads what finished jobs used as part of releasing them, off the
    runner's path (podman: on a background thread, just before each container goes)."""

    def release_measured(
        self, names: Iterable[str], measure: Collection[str], measured: Callable[[str, Usage], None]
    ) -> None:
        """Release ``names``; for each in ``measure`` first call ``measured(name, usage)``,
        perhaps later and from another thread."""


@runtime_checkable
class DropsNetworks(Protocol):
    """A backend that makes a network per gang on this machine (local podman): after a crash
    the runner asks it to remove the run's networks that no attempt in flight uses."""

    def drop_networks(self, run_id: str, keep: Collection[str]) -> list[str]:
        """Remove the run's gang networks whose job is not in ``keep`` (names of attempts in
        flight); the networks removed."""


@runtime_checkable
class WatchesNewRuns(Protocol):
    """A backend whose ``watch`` first lists the run's jobs (local podman: ``ps``), which a
    run that has launched nothing yet skips: each attempt is stored before it is launched,
    so a run with no attempt stored has no job anywhere."""

    def watch_new(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """``watch`` for a run with no job yet: nothing to list or adopt."""


@runtime_checkable
class SettlesLaunches(Protocol):
    """A backend whose launches outlive a killed executor (local podman's attached runs, in
    sessions of their own): a resumed run waits them out before it lists its containers."""

    def settle_launches(self, names: Collection[str]) -> list[str]:
        """Wait until no launch of the containers ``names`` is in flight (``execute.orphans``);
        the names whose launchers were killed because they never finished."""


@runtime_checkable
class Checkpoints(Protocol):
    """A backend that can dump a running job with CRIU (``checkpoint:``) and start a job from
    such a dump (``Job.restore``)."""

    def checkpoint(
        self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
    ) -> float:
        """Dump job ``name`` to ``dest`` (stopping it unless ``leave_running``), with
        ``outputs`` (its /out, where to copy it) copied while it is frozen for the dump
        (``checkpoint.freeze``); the seconds it took.  HetflowError saying why when it cannot."""
