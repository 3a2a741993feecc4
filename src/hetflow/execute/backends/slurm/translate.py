"""A step attempt in Slurm's terms: sbatch's options and the batch script (pure functions).

The script runs the container with ``podman run`` in the foreground, so the job lasts as
long as the container and its exit code is the container's (what ``afterok`` tests); it
gives the container exactly the GPUs Slurm assigned (SLURM_JOB_GPUS), stops it on scancel,
and writes the job files that ``jobfiles`` reads.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm.checkpoint import checkpointed_end, restore_end, restore_start
from hetflow.execute.backends.slurm.gang import gang_sbatch_args
from hetflow.execute.backends.slurm.gres import gpu_vendor, gres_args, mps_env, share_env
from hetflow.execute.backends.slurm.script.cgroup import JOB_CGROUP
from hetflow.execute.backends.slurm.script.devices import device_dir, gpu_devices, mig_devices
from hetflow.execute.backends.slurm.script.publish import publish_script
from hetflow.execute.backends.slurm.script.usage import MEASURE_END, MEASURE_START
from hetflow.execute.backends.slurm.settings import SlurmSettings
from hetflow.execute.engine import run_args


def sbatch_args(job: Job, settings: SlurmSettings, dependency_ids: Sequence[str], jobdir: Path) -> list[str]:
    """sbatch's options for one attempt (sbatch(1)); a pure function, for tests."""
    args = [
        "--parsable",
        f"--job-name={job.name}",
        f"--comment=hetflow run={job.run_id}",
        f"--chdir={jobdir}",
        f"--output={jobdir / job.name}.out",
        # hetflow retries, as a new attempt with its own name and staging folder; Slurm's own
        # requeue (JobRequeue=1, the default, on NODE_FAIL) would run this attempt a second
        # time under the same job id while the first may still be writing its outputs on a
        # node that only lost its slurmd (sbatch(1) --no-requeue).
        "--no-requeue",
    ]
    if job.gang is not None:
        args += gang_sbatch_args(job, settings)  # N tasks over the plan's nodes (``gang``)
    else:
        args += [
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={max(1, math.ceil(job.cpus))}",
            # --mem=0 would mean "all of the node's memory"
            f"--mem={max(1, math.ceil(job.memory / 2**20))}M",
        ]
        args += gres_args(job, settings)  # whole GPUs, a shard/mps share, a MIG instance (``gres``)
    if job.node:
        args.append(f"--nodelist={job.node}")
    if job.node_class and settings.use_features:
        args.append(f"--constraint={job.node_class}")
    if dependency_ids:
        # The child never runs if a parent fails: Slurm cancels it (Reason=DependencyNeverSatisfied)
        # instead of leaving it pending forever.
        args += [f"--dependency=afterok:{':'.join(dependency_ids)}", "--kill-on-invalid-dep=yes"]
    if settings.partition:
        args.append(f"--partition={settings.partition}")
    if settings.account:
        args.append(f"--account={settings.account}")
    return [*args, *settings.extra_args]


_SCRIPT = """#!/bin/bash
# hetflow step attempt {name} (run {run_id}); written by hetflow.execute.backends.slurm.
# The container runs in the foreground: the job lasts as long as the container, and the
# job's exit code is the container's (what afterok tests).
set -u
stopping=0
trap 'stopping=1' TERM INT  # see below
export PATH="${{PATH:-/usr/bin:/bin}}:/usr/local/bin:/usr/sbin:/sbin"
export CONTAINERS_CONF={conf}
podman={podman}; hooks={hooks}; name={name}; log={log}; jobdir={jobdir}
exitf="$jobdir/$name.exit"
node="${{SLURMD_NODENAME:-$(hostname -s)}}"
devdir={devdir}
rm -f "$exitf"
cri() {{ printf '%s stderr F hetflow: %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%N+00:00)" "$*" >> "$log"; }}
finish() {{ printf '%s %s\\n' "$1" "${{SLURM_JOB_ID:-}}" > "$exitf.$$" && mv -f "$exitf.$$" "$exitf"; exit "$1"; }}
printf 'node=%s\\njob=%s\\ngpus=%s\\n' "$node" "${{SLURM_JOB_ID:-}}" "${{SLURM_JOB_GPUS:-}}" > "$jobdir/$name.start"
echo "started=$(date +%s.%N)" >> "$jobdir/$name.start"  # Slurm's StartTime to the second, refined (``usage``)

gpu=()
slurm_gpus={gpu_list}
if [ -n "$slurm_gpus" ]; then
  IFS=, read -r -a given <<< "$slurm_gpus"
{gpu_devices}fi

# scancel sends SIGTERM to every process of the job (then SIGKILL after KillWait): stop the
# container, which conmon keeps outside this job's processes, and record its exit code.  A
# stop that comes while podman is still creating the container is repeated until it ends.
"$podman" --hooks-dir "$hooks" rm -f --ignore "$name" >/dev/null 2>&1
if [ "$stopping" = 1 ]; then finish 143; fi
# The container's cgroup goes under the job's, so Slurm's limits and kill reach it (``cgroup``).
# A job restored from a checkpoint restores it here, and starts from zero if it cannot (``checkpoint``).
{job_cgroup}{restore_start}"$podman" --hooks-dir "$hooks" run --rm --attach stdout {options} "${{cgparent[@]}}" \\
  "${{gpu[@]}}" {image_command} \\
  </dev/null >/dev/null 2>"$jobdir/$name.err" &
{restore_fi}pid=$!
while kill -0 "$pid" 2>/dev/null; do
  if [ "$stopping" = 1 ]; then
    "$podman" --hooks-dir "$hooks" stop --ignore -t {stop_timeout} "$name" >/dev/null 2>&1; sleep 0.2
  else
    wait "$pid"
  fi
done
wait "$pid"; code=$?
{restored_end}{measure_end}{checkpointed}if [ "$stopping" = 1 ]; then
  "$podman" --hooks-dir "$hooks" rm -f --ignore "$name" >/dev/null 2>&1  # podman itself may have been killed
  if [ "$code" = 0 ]; then code=143; fi
fi
if [ "$code" -ge 125 ] && [ "$code" -le 127 ] && [ -s "$jobdir/$name.err" ]; then
  cri "$podman run exited $code: $(tail -n 3 "$jobdir/$name.err" | tr '\\n' ' ')"
fi
{publish}finish "$code"
"""


def env_file_of(jobdir: Path, name: str) -> Path:
    """Where a job's environment waits for its node's ``podman run --env-file``."""
    return jobdir / f"{name}.env"


def job_script(job: Job, settings: SlurmSettings, jobdir: Path, conf: str, hooks: str, criu_dir: str = "") -> str:
    """The batch script: podman run in the foreground with exactly the GPUs Slurm gave; or,
    for a job with ``restore``, the container restored from that checkpoint (``checkpoint``)."""
    spec = job.container
    # the values travel in NAME.env beside the script (0600, written by submit), never in it
    # or on the node's podman command line
    args = run_args(spec, engine="podman", env_file=env_file_of(jobdir, job.name) if spec.env else None)
    start = len(args) - len(spec.command) - 1
    if args[:2] != ["run", "-d"] or args[start] != spec.image:
        raise EngineError(f"unexpected podman arguments for {job.name}: {args[:2]} ... {args[start]}")
    q = shlex.quote
    shared = job.gpu_request is not None and job.gpu_request.kind == "share"
    mig = job.gpu_request is not None and job.gpu_request.kind == "mig"
    devices = (
        mig_devices(settings, "finish")  # its one MIG instance, by the node's table
        if mig
        else gpu_devices(settings, "finish", gpu_vendor(job), {**mps_env(job, settings), **share_env(job, settings)})
    )
    return _SCRIPT.format(
        name=q(job.name),
        run_id=job.run_id,
        conf=q(conf),
        podman=q(settings.podman),
        hooks=q(hooks),
        log=q(spec.log_path or os.devnull),
        jobdir=q(str(jobdir)),
        devdir=device_dir(settings),
        # a shard or mps job gets no SLURM_JOB_GPUS (Slurm 22.05): its GPU's index is in
        # GPU_DEVICE_ORDINAL, which Slurm sets for every gres that names GPU files
        gpu_list='"${SLURM_JOB_GPUS:-${GPU_DEVICE_ORDINAL:-}}"' if shared else '"${SLURM_JOB_GPUS:-}"',
        gpu_devices=devices,
        stop_timeout=int(settings.stop_timeout) if spec.stop_grace is None else spec.stop_grace,  # step's stop_grace
        job_cgroup=JOB_CGROUP + MEASURE_START,  # the container's own cgroup, for its usage (``usage``)
        measure_end=MEASURE_END,
        options=" ".join(q(a) for a in args[2:start]),
        image_command=" ".join(q(a) for a in args[start:]),
        restore_start=restore_start(job, criu_dir),
        restore_fi=restore_end(job, int(settings.stop_timeout))[0],
        restored_end=restore_end(job, int(settings.stop_timeout))[1],
        checkpointed=checkpointed_end(),  # a dump stopped the container: requeued, not failed
        publish=publish_script(job),  # the outputs in place before the job ends 0 (``publish``)
    )
