"""Slurm: one batch job per step attempt; Slurm orders them (afterok) and assigns GPUs (gres).

    submit  sbatch --parsable --job-name=hf-RUN-STEP-N --comment="hetflow run=RUN" --no-requeue
                   --dependency=afterok:ID[:ID...] --kill-on-invalid-dep=yes ... JOBDIR/NAME.sh
    poll    squeue --me --states=all     (what slurmctld remembers: MinJobAge after the end)
            + JOBDIR/NAME.exit           (the container's exit code, written by the job script)
    cancel  scancel ID...                (the script's TERM trap runs `podman stop`)

Every node must see the work directory; a run's job files live in ``WORKDIR/RUN``::

    NAME.sh     the batch script           NAME.jobid  Slurm's job id (adoption after a restart)
    NAME.start  node, job id, SLURM_JOB_GPUS, the node's clock, written when the job starts
    NAME.exit   "CODE JOBID", written last (atomically) by the job script
    NAME.out    the script's own output: podman's errors, slurmstepd's CANCELLED notes
    NAME.err    podman's stderr (its own messages; the container's streams go to the log)
    NAME.usage  the container's peak memory, CPU time, start and end, measured by the script (``usage``)

Exit codes come from the ``.exit`` file first: it is the container's own code and it outlives
slurmctld's memory of the job, which needs no accounting database (sacct answers only where
slurmdbd runs).  Slurm's own ``ExitCode`` (``scontrol show job``) and ``sacct`` are fallbacks
for jobs that ended before the script could write the file.

Faults (issue 12).  A job PENDING in Slurm's queue is shown "queued" (its step stays RUNNING
in the store: handed over, adopted on resume).  A job its node ended (NODE_FAIL, BOOT_FAIL,
PREEMPTED) is a node fault: hetflow runs the step again as a new attempt, outside its
retries (``attempts.NODE_FAULT_REQUEUES`` times); Slurm never requeues an attempt itself
(--no-requeue), so one attempt never runs twice.  A job submitted but never recorded is
found again by its name and comment in squeue.  The container's cgroup goes under the job's
(``cgroup``: podman run --cgroup-parent), so Slurm's limits and kill reach it.

Outputs (issue 30).  Slurm starts a child as soon as its parent's job ends, before hetflow has
seen that end, so the job script itself moves the step's outputs from the attempt's /out into
``steps/STEP/out`` (one rename on the shared file system) once the container ends 0, and ends
non-zero when a declared output is missing (``publish``); the executor only verifies and hashes.
The rename happens only while the step's fencing token names the job's attempt (issue 37,
``execute.data.fencing``, checked under flock(1) with the rename): a job whose node hetflow
declared failed, still running there, never replaces a later attempt's accepted outputs.

The container's output goes to ``job.container.log_path`` in CRI format (podman's k8s-file
driver, as with the local backend); the script adds its own messages there as CRI records
(``TIME stderr F hetflow: ...``) when the container could not be started.

Checkpoints (issue 27, ``checkpoint``).  ``SlurmBackend.checkpoint`` dumps a job's container
as a step of the job on its node (``srun --jobid=ID --overlap``, podman and the nodes' CRIU);
NAME.checkpointed (left by a dump that stops the container) makes the script end
``CHECKPOINTED`` instead of failing.  A job with ``Job.restore`` restores its container from
the image in the run's folder (cgroup rewritten on the node), and starts from zero if it cannot.

A gang step (``gang:``) is one job of ``replicas`` tasks (``--nodes``, ``--ntasks``,
``--ntasks-per-node``, ``--gpus-per-task``): the batch script starts them with ``srun``, each
task runs one replica's container on the host network with its share of the node's GPUs and
the launch contract, and the batch script folds their exit codes into NAME.exit; the
per-replica files (NAME.task.sh, NAME.r<RANK>.host/.exit/.err) are in ``gang``'s docstring.

Modules: ``settings`` (SlurmSettings, gres types), ``gres`` (a GPU request as gres: typed
gpu, shard, mps, MIG profiles), ``translate`` (sbatch options and the
batch script, pure), ``gang`` (a gang's allocation and scripts, pure), ``client`` (the
commands), ``queue`` (squeue/scontrol/sacct parsing), ``jobfiles`` (the files above),
``checkpoint`` (CRIU dump and restore), ``backend`` (submit, poll, cancel, release,
checkpoint); ``script/``, the shell the job scripts are made of: ``cgroup`` (the job's cgroup
for podman), ``devices`` (the GPUs Slurm assigned), ``usage`` (what the container used,
measured on its node), ``publish`` (the outputs put in place by the job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.slurm.backend import SlurmBackend
    from hetflow.execute.backends.slurm.gres import gres_args, mps_count, shard_count
    from hetflow.execute.backends.slurm.queue import ACTIVE_STATES
    from hetflow.execute.backends.slurm.settings import DEFAULT_GRES_TYPES, SlurmSettings, gres_type
    from hetflow.execute.backends.slurm.translate import job_script, sbatch_args

_WHERE = {
    "backend": ["SlurmBackend"],
    "gres": ["gres_args", "mps_count", "shard_count"],
    "queue": ["ACTIVE_STATES"],
    "settings": ["DEFAULT_GRES_TYPES", "SlurmSettings", "gres_type"],
    "translate": ["job_script", "sbatch_args"],
}

__all__ = [
    "ACTIVE_STATES",
    "DEFAULT_GRES_TYPES",
    "SlurmBackend",
    "SlurmSettings",
    "gres_args",
    "gres_type",
    "job_script",
    "mps_count",
    "sbatch_args",
    "shard_count",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
