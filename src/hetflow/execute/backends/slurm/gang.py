"""A gang step attempt in Slurm's terms: one batch job of ``replicas`` tasks started with
``srun``, each task running one replica's container (pure functions, like ``translate``).

    sbatch --nodes=N --ntasks=R [--ntasks-per-node=P] --cpus-per-task=C --mem-per-cpu=M
           [--gpus-per-task=[TYPE:]G] ... NAME.sh
    NAME.sh        (the batch step, on the first node)  srun --ntasks=R ... NAME.task.sh
    NAME.task.sh   (task SLURM_PROCID on its node)      podman run replica SLURM_PROCID

Slurm allocates every task at once or none (a job starts when all its nodes are free), so
no replica ever holds a node or a GPU while it waits for the others.

Where a task lands is Slurm's choice (``--distribution``, ``--ntasks-per-node``), so the
replicas learn it from each other, not from a prediction: each task writes
``NAME.r<RANK>.host`` (its node's address, from ``scontrol show node``'s NodeAddr, and the
node's name) into the shared job folder and waits until all ``R`` are there; then every
replica's launch contract (``execute.gang.replicas``) follows: MASTER_ADDR is rank 0's node,
NODE_RANK is SLURM_NODEID, LOCAL_RANK is SLURM_LOCALID, LOCAL_WORLD_SIZE counts the
replicas that share its node.  Replicas run on the host network (they talk across nodes);
an MPI gang's sshd listens on ``port + rank`` and rank 0 fills the ssh_config's
placeholder hosts (``mpilaunch.resolve_hosts``'s format) before it starts ``mpirun``.

GPUs: srun gives the step all the job's GPUs on each node (SLURM_STEP_GPUS, gres indices as
in gres.conf's File= order); the task on local rank L takes the L-th share of ``gpus``, so
replicas on one node never share a GPU, and maps them to device nodes as a single step does.

Ending: each task writes ``NAME.r<RANK>.exit``.  Under ``launcher: mpi`` replica 0 decides
(the workers serve its ``mpirun``): when it ends the others are stopped.  Otherwise a
replica that fails stops the rest.  The batch step folds the replicas' codes into the
job's (``FOLD``: the first failure hetflow did not cause, as ``execute.gang.replicas`` does)
and writes ``NAME.exit`` as a single step's script does, so ``poll`` reads a gang as one job.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm import jobfiles
from hetflow.execute.backends.slurm.gres import gpu_vendor
from hetflow.execute.backends.slurm.script.cgroup import JOB_CGROUP
from hetflow.execute.backends.slurm.script.devices import device_dir, gpu_devices
from hetflow.execute.backends.slurm.script.publish import publish_script
from hetflow.execute.backends.slurm.script.usage import MEASURE_END, MEASURE_START
from hetflow.execute.backends.slurm.settings import SlurmSettings, gres_type
from hetflow.execute.engine import ContainerSpec, run_args
from hetflow.execute.gang.mpilaunch import mpi_folder
from hetflow.execute.gang.replicas import Quantity, gang_state, render_contract

BARRIER_TIMEOUT = 300  # seconds a replica waits for the others to report their node


def gang_sbatch_args(job: Job, settings: SlurmSettings) -> list[str]:
    """The allocation of a gang (replaces a single step's --nodes/--ntasks/--cpus/--mem/--gres)."""
    assert job.gang is not None
    gang = job.gang
    cpus = max(1, math.ceil(job.cpus))
    nodes = max(job.nodes, gang.nodes_at_least())
    args = [f"--nodes={min(nodes, gang.replicas)}", f"--ntasks={gang.replicas}", f"--cpus-per-task={cpus}"]
    if gang.per_node is not None:
        args.append(f"--ntasks-per-node={gang.per_node}")
    # --mem is per node and a node may hold several replicas: ask per CPU instead
    args.append(f"--mem-per-cpu={max(1, math.ceil(job.memory / 2**20 / cpus))}M")
    if job.gpus:
        kind = gres_type(job.gpu_model, settings.gres_types)
        args.append(f"--gpus-per-task={kind}:{job.gpus}" if kind else f"--gpus-per-task={job.gpus}")
    return args


# The gang's exit code from the replicas' NAME.r<RANK>.exit files, in shell (the batch step
# runs it): the rule of ``execute.gang.replicas.gang_state``, which the unit tests hold it to.  Under
# mpi (``lead=1``) replica 0's code; otherwise the first failure hetflow did not cause by
# stopping a replica (137, 143), then any failure, else 0.  A replica that left no code
# counts as killed (137).
FOLD = """code=0; first=""; own=""
for ((r = 0; r < world; r++)); do
  c=$(cut -d' ' -f1 "$jobdir/$name.r$r.exit" 2>/dev/null); c=${c:-137}
  if [ "$lead" = 1 ]; then code=$c; break; fi
  if [ "$c" != 0 ]; then
    first=${first:-$c}
    if [ "$c" != 137 ] && [ "$c" != 143 ]; then own=${own:-$c}; fi
  fi
done
if [ "$lead" != 1 ]; then code=${own:-${first:-0}}; fi
"""


_BATCH = """#!/bin/bash
# hetflow gang attempt {name} (run {run_id}): {world} replicas, one srun task each; written
# by hetflow.execute.backends.slurm.gang.  This batch step waits for srun and folds the
# replicas' exit codes (NAME.r<RANK>.exit) into the job's.
set -u
stopping=0
trap 'stopping=1' TERM INT
export PATH="${{PATH:-/usr/bin:/bin}}:/usr/local/bin:/usr/sbin:/sbin"
name={name}; jobdir={jobdir}; world={world}; lead={lead}
exitf="$jobdir/$name.exit"
rm -f "$exitf" "$jobdir/$name".r*.host "$jobdir/$name".r*.exit
finish() {{ printf '%s %s\\n' "$1" "${{SLURM_JOB_ID:-}}" > "$exitf.$$" && mv -f "$exitf.$$" "$exitf"; exit "$1"; }}
node="${{SLURMD_NODENAME:-$(hostname -s)}}"
printf 'node=%s\\njob=%s\\ngpus=%s\\nnodes=%s\\n' "$node" "${{SLURM_JOB_ID:-}}" "${{SLURM_JOB_GPUS:-}}" \\
  "${{SLURM_JOB_NODELIST:-}}" > "$jobdir/$name.start"
echo "started=$(date +%s.%N)" >> "$jobdir/$name.start"  # Slurm's StartTime to the second, refined (``usage``)
if [ "$stopping" = 1 ]; then finish 143; fi
srun --ntasks={world} --cpus-per-task={cpus} --kill-on-bad-exit=0 --job-name="$name" \\
  /bin/bash "$jobdir/$name.task.sh" </dev/null &
pid=$!
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
{fold}if [ "$stopping" = 1 ] && [ "$code" = 0 ]; then code=143; fi
{publish}finish "$code"
"""

_TASK = """#!/bin/bash
# One replica of hetflow gang attempt {name}: srun runs this once per task.
set -u
stopping=0
trap 'stopping=1' TERM INT
export PATH="${{PATH:-/usr/bin:/bin}}:/usr/local/bin:/usr/sbin:/sbin"
export CONTAINERS_CONF={conf}
podman={podman}; hooks={hooks}; name={name}; jobdir={jobdir}; world={world}; lead={lead}
per={gpus}; launcher={launcher}; port={port}; mpi_dir={mpi_dir}
rank="${{SLURM_PROCID:?srun sets SLURM_PROCID}}"
node="${{SLURMD_NODENAME:-$(hostname -s)}}"
devdir={devdir}
myexit="$jobdir/$name.r$rank.exit"
done_() {{ printf '%s %s\\n' "$1" "$node" > "$myexit.$$" && mv -f "$myexit.$$" "$myexit"; exit "$1"; }}
case "$rank" in
{logs}esac
cri() {{ printf '%s stderr F hetflow: %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%N+00:00)" "$*" >> "$log"; }}

# 1. Where every replica runs: each writes its node's address, then waits for the others.
addr=$(scontrol show node -o "$node" 2>/dev/null | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')
addr=${{addr:-$node}}
me="$jobdir/$name.r$rank.host"
printf '%s %s\\n' "$addr" "$node" > "$me.$$" && mv -f "$me.$$" "$me"
deadline=$(( $(date +%s) + {barrier} ))
while :; do
  n=0; for ((r = 0; r < world; r++)); do [ -s "$jobdir/$name.r$r.host" ] && n=$((n + 1)); done
  [ "$n" = "$world" ] && break
  if [ "$stopping" = 1 ]; then done_ 143; fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    cri "only $n of $world replicas reported their node in {barrier}s"; done_ 125
  fi
  sleep 0.2
done
{contract}if [ "$launcher" = mpi ] && [ "$rank" = 0 ]; then
  # mpirun reaches replica r at hosts[r] (its ssh alias's HostName; its sshd's port is fixed)
  cfg="$mpi_dir/ssh_config"
  for ((r = 0; r < world; r++)); do
    sed -i "s/^\\([[:space:]]*HostName \\)hetflow-host-$r\\$/\\1${{hosts[$r]}}/" "$cfg"
  done
  if grep -q 'HostName hetflow-host-' "$cfg"; then cri "the MPI ssh_config still names placeholder hosts"; done_ 125; fi
fi

# 2. This replica's GPUs: its share of what srun gave the step on this node.
gpu=()
step_gpus="${{SLURM_STEP_GPUS:-${{SLURM_JOB_GPUS:-}}}}"
if [ "$per" -gt 0 ]; then
  IFS=, read -r -a all <<< "$step_gpus"
  given=("${{all[@]:$((local_rank * per)):$per}}")
  if [ "${{#given[@]}}" != "$per" ]; then
    cri "replica $rank (local rank $local_rank on $node) needs $per GPU(s), but the step has '$step_gpus' there"
    done_ 125
  fi
{gpu_devices}fi

# 3. The container, in the foreground; stopped on scancel, or when the gang is over for it
#    (mpi: replica 0 ended; otherwise: another replica failed).
"$podman" --hooks-dir "$hooks" rm -f --ignore "$cname" >/dev/null 2>&1
if [ "$stopping" = 1 ]; then done_ 143; fi
{job_cgroup}{measure_start}"$podman" --hooks-dir "$hooks" run --rm --attach stdout \\
  "${{opts[@]}}" "${{cgparent[@]}}" "${{gpu[@]}}" "${{contract[@]}}" "${{image_cmd[@]}}" \\
  </dev/null >/dev/null 2>"$jobdir/$name.r$rank.err" &
pid=$!
over() {{
  if [ "$launcher" = mpi ]; then [ "$rank" != 0 ] && [ -e "$jobdir/$name.r0.exit" ]; return; fi
  for ((r = 0; r < world; r++)); do
    [ "$r" = "$rank" ] && continue
    c=$(cut -d' ' -f1 "$jobdir/$name.r$r.exit" 2>/dev/null)
    [ -n "$c" ] && [ "$c" != 0 ] && return 0
  done
  return 1
}}
stopped=0
while kill -0 "$pid" 2>/dev/null; do
  if [ "$stopping" = 1 ] || over; then
    stopped=1
    "$podman" --hooks-dir "$hooks" stop --ignore -t {stop_timeout} "$cname" >/dev/null 2>&1
  fi
  sleep 0.5
done
wait "$pid"; code=$?
{measure_end}if [ "$stopped" = 1 ]; then
  "$podman" --hooks-dir "$hooks" rm -f --ignore "$cname" >/dev/null 2>&1
  if [ "$code" = 0 ] && [ "$stopping" = 1 ]; then code=143; fi
  # a worker stopped because its launcher ended has done its part
  if [ "$launcher" = mpi ] && [ "$rank" != 0 ] && [ "$stopping" = 0 ]; then code=0; fi
fi
if [ "$code" -ge 125 ] && [ "$code" -le 127 ] && [ -s "$jobdir/$name.r$rank.err" ]; then
  cri "$podman run exited $code: $(tail -n 3 "$jobdir/$name.r$rank.err" | tr '\\n' ' ')"
fi
done_ "$code"
"""


# Where the replicas landed, read from the NAME.r<RANK>.host files every task wrote (step 1
# of ``_TASK``; ``node`` is this task's node), and this replica's launch contract from it:
# the ``contract`` array of ``podman run`` words.  Kept apart so that the contract's table test
# runs this very bash (tests/unit/test_gang_contract.py).
RANK_LAYOUT = """hosts=(); nodes=()
for ((r = 0; r < world; r++)); do read -r h nd < "$jobdir/$name.r$r.host"; hosts+=("$h"); nodes+=("$nd"); done
local_size=0; for nd in "${nodes[@]}"; do [ "$nd" = "$node" ] && local_size=$((local_size + 1)); done
local_rank=0; for ((r = 0; r < rank; r++)); do [ "${nodes[$r]}" = "$node" ] && local_rank=$((local_rank + 1)); done
node_rank=0; seen=" "
for ((r = 0; r < world; r++)); do
  nd=${nodes[$r]}; [ "$nd" = "$node" ] && break
  case "$seen" in *" $nd "*) ;; *) seen="$seen$nd "; node_rank=$((node_rank + 1)) ;; esac
done
"""

# Each quantity of the launch contract (``execute.gang.replicas.LAUNCH_CONTRACT``) as the task script
# holds it once every replica has reported its node (step 1 of ``_TASK``).
SHELL_VALUES: dict[Quantity, str] = {
    "rank": "$rank",
    "world": "$world",
    "node_rank": "$node_rank",
    "local_rank": "$local_rank",
    "local_size": "$local_size",
    "master_addr": "${hosts[0]}",
    "port": "$port",
}


def contract_script(launcher: str) -> str:
    """Bash that sets ``contract``, the ``podman run --env`` words of a replica under
    ``launcher``: the launch contract (``"NAME=$value"``, evaluated in the task) and where it
    runs (HETFLOW_NODE, HETFLOW_SLURM_JOB)."""
    words = " ".join(f'--env "{name}={value}"' for name, value in render_contract(launcher, SHELL_VALUES).items())
    return (
        f"{RANK_LAYOUT}contract=({words})\n"
        'contract+=(--env "HETFLOW_NODE=$node" --env "HETFLOW_SLURM_JOB=${SLURM_JOB_ID:-}")\n'
    )


def failed_replica(jobdir: Path, name: str) -> str:
    """Which replica failed the gang ``name``, from the codes its replicas left
    (NAME.r<RANK>.exit), folded as the batch step folds them (``gang_state``): the reason the
    other backends give ("replica 1 failed (replica 1 exited 5)"); "" when none failed or
    ``name`` is no gang."""
    codes: dict[int, tuple[bool, int | None, str]] = {}
    for path in jobdir.glob(f"{name}.r*.exit"):
        rank = path.name[len(name) + 2 : -len(".exit")]
        if rank.isdigit():
            codes[int(rank)] = (False, jobfiles.exit_code(path), "exited")
    if not codes:
        return ""
    g = gang_state(codes, max(codes) + 1)
    return f"replica {g.failed_rank} failed ({g.status})" if g.failed_rank is not None else ""


def replica_env_file(jobdir: Path, name: str, rank: int) -> Path:
    """Where replica ``rank``'s environment waits for its node's ``podman run --env-file``
    (written 0600 by submit; the task script holds no value)."""
    return jobdir / f"{name}.r{rank}.env"


def _replica_case(rank: int, spec: ContainerSpec, env_file: Path | None) -> str:
    """One ``case`` arm: replica ``rank``'s container name, log, podman options and command."""
    args = run_args(spec, engine="podman", env_file=env_file)
    start = len(args) - len(spec.command) - 1
    if args[:2] != ["run", "-d"] or args[start] != spec.image:
        raise EngineError(f"unexpected podman arguments for {spec.name}: {args[:2]} ... {args[start]}")
    q = shlex.quote
    return (
        f"  {rank}) cname={q(spec.name)}; log={q(spec.log_path or os.devnull)}\n"
        f"     opts=({' '.join(q(a) for a in args[2:start])})\n"
        f"     image_cmd=({' '.join(q(a) for a in args[start:])}) ;;\n"
    )


def gang_scripts(job: Job, settings: SlurmSettings, jobdir: Path, conf: str, hooks: str) -> tuple[str, str]:
    """The batch script (NAME.sh) and the per-task script (NAME.task.sh) of a gang attempt."""
    assert job.gang is not None
    gang = job.gang
    ranks = job.ranks or (job.container,)
    if len(ranks) != gang.replicas:
        raise EngineError(f"{job.name}: {len(ranks)} replica containers for a gang of {gang.replicas}")
    q = shlex.quote
    lead = "1" if gang.launcher == "mpi" else "0"
    mpi_dir = mpi_folder(ranks[0].mounts) or ""
    batch = _BATCH.format(
        name=q(job.name),
        run_id=job.run_id,
        jobdir=q(str(jobdir)),
        world=gang.replicas,
        lead=lead,
        cpus=max(1, math.ceil(job.cpus)),
        fold=FOLD,
        publish=publish_script(job),  # rank 0's /out in place before the job ends 0 (``publish``)
    )
    task = _TASK.format(
        name=q(job.name),
        conf=q(conf),
        podman=q(settings.podman),
        hooks=q(hooks),
        jobdir=q(str(jobdir)),
        world=gang.replicas,
        lead=lead,
        gpus=int(job.gpus),
        launcher=q(gang.launcher),
        contract=contract_script(gang.launcher),
        port=gang.port,
        mpi_dir=q(mpi_dir),
        devdir=device_dir(settings),
        gpu_devices=gpu_devices(settings, "done_", gpu_vendor(job)),  # AMD/Intel replicas: their render nodes
        barrier=BARRIER_TIMEOUT,
        stop_timeout=int(settings.stop_timeout) if ranks[0].stop_grace is None else ranks[0].stop_grace,
        job_cgroup=JOB_CGROUP,  # the replica's container under the job's cgroup (``cgroup``)
        # rank 0's container measured, as locally: the attempt's own (NAME.usage, ``usage``)
        measure_start=f'usecg=""\nif [ "$rank" = 0 ]; then\n{MEASURE_START}fi\n',
        measure_end=f'if [ "$rank" = 0 ]; then\n{MEASURE_END}fi\n',
        logs="".join(
            _replica_case(i, spec, replica_env_file(jobdir, job.name, i) if spec.env else None)
            for i, spec in enumerate(ranks)
        ),
    )
    return batch, task
