"""CRIU checkpoints of a Slurm job's container, and a job restored from one (issue 27).

Dump.  A job's container runs on its node, under conmon, so the dump runs there too: as a
step of the job itself, the way a Slurm user runs a command inside a running job (srun(1)
``--jobid=ID --overlap``: the step shares the job's CPUs, memory and GRES with the batch
step instead of waiting for them; Slurm 22.05 has it), which runs ``podman container
checkpoint --export IMAGE --compress none [--leave-running] NAME`` with the nodes' CRIU first
on PATH and the job script's CONTAINERS_CONF.  IMAGE is in the run's folder, which every node
shares.  A dump that stops the container (no ``--leave-running``: ``hetflow stop
--checkpoint``, a migration) ends the job's ``podman run`` (with exit 127 on podman 4.3), so
the backend first leaves ``NAME.checkpointed`` in the job's folder: the script sees it, skips
publishing, and ends ``CHECKPOINTED_CODE`` with ``checkpointed`` after the code and job id in
NAME.exit; ``poll`` reports it ``CHECKPOINTED``
(``JobState.checkpointed``), which the runner requeues, never a failure.  A dump that fails
removes the file again.

Restore (``Job.restore``).  Before sbatch, ``ready_image`` gives the image the new attempt's
identity (``checkpoint.archive.retarget``: ID, name, labels, its /out folder) and turns off
podman's autoremove (the job was started with ``--rm``; a restored container that removed
itself would leave ``podman wait`` no exit code).  The cgroup parent is only known on the
node (``cgroup.JOB_CGROUP``, ``usage.MEASURE_START``): the script replaces the old one in
``config.dump``/``spec.dump`` there (extracted with tar, edited with sed, appended with
``tar -r``: the last member wins).  It then copies the outputs kept with the checkpoint into
/out, runs ``podman container restore --import`` (detached), hard-links podman's log file as
the attempt's log and ``podman wait``s the container, which ``scancel`` stops as the run path
does.  A restore that fails starts the attempt from zero with ``podman run`` and says so in
the log.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.slurm.jobfiles import MARKER
from hetflow.execute.checkpoint.archive import KEEP_EXITED, ready_for

# The job script's end when its container was dumped and stopped: not the step's code.
CHECKPOINTED_CODE = 121
VERDICT = "checkpointed"  # NAME.exit's third word for such an end (``jobfiles.exit_verdict``)

# srun's program on the node: $1 CRIU's folder, $2 CONTAINERS_CONF, $3 the container's /out and
# $4 where to copy it ("" for no copy), then podman's command (its last word the container);
# the copy is taken while the container's cgroup is frozen (``checkpoint.freeze``: CRIU dumps
# a frozen cgroup and leaves it frozen), else right after the dump; prints when the dump began
# and ended there (the container was paused that long)
DUMP = r"""c=$1; k=$2; o=$3; d=$4; shift 4; eval "n=\${$#}"; f=; v=; t=
copy() { mkdir -p "$d" && { [ ! -d "$o" ] || cp -a "$o/." "$d/"; } || { echo "cannot copy $o" >&2; return 1; }; }
frozen() { if [ "$v" = 1 ]; then grep -qx 'frozen 1' "${f%/*}/cgroup.events"; else [ "$(cat "$f")" = FROZEN ]; fi; }
s=$(date +%s.%N)
if [ -n "$d" ]; then
  g=$(CONTAINERS_CONF="$k" "$1" inspect --format '{{.State.CgroupPath}}' "$n" 2>/dev/null); r=/sys/fs/cgroup
  if [ -f $r/cgroup.controllers ]; then f=$r$g/cgroup.freeze; v=1; t=0
  else f=$r/freezer$g/freezer.state; v=FROZEN; t=THAWED; fi
  if [ -n "$g" ] && [ -w "$f" ] && echo $v > "$f" 2>/dev/null; then
    i=0; while ! frozen; do i=$((i+1)); [ $i -lt 1000 ] || { echo $t > "$f"; f=; break; }; sleep 0.01; done
  else f=; fi
  if [ -n "$f" ]; then copy || { echo $t > "$f"; exit 1; }; fi
fi
PATH="$c:$PATH" CONTAINERS_CONF="$k" "$@"; rc=$?; e=$(date +%s.%N)
if [ -n "$f" ]; then echo $t > "$f"; elif [ -n "$d" ] && [ $rc = 0 ]; then copy || rc=1; fi
echo "hetflow-dump $s $e"; exit $rc"""


def dump_args(
    job_id: str,
    name: str,
    dest: Path,
    *,
    leave_running: bool,
    podman: str,
    hooks: str,
    conf: str,
    criu_dir: str,
    outputs: tuple[Path, Path] | None = None,
) -> list[str]:
    """srun's arguments for dumping job ``job_id``'s container ``name`` to ``dest`` (with
    ``outputs``, its /out and where to copy it while it is frozen for the dump)."""
    leave = ["--leave-running"] if leave_running else []
    podman_args = ["--hooks-dir", hooks, "container", "checkpoint", "--export", str(dest), "--compress", "none"]
    copy = [str(outputs[0]), str(outputs[1])] if outputs else ["", ""]
    return [
        "srun",
        f"--jobid={job_id}",
        "--overlap",  # beside the batch step, which holds the job's resources
        "--nodes=1",
        "--ntasks=1",
        "--quiet",
        "sh",
        "-c",
        DUMP,
        "sh",
        criu_dir,
        conf,
        *copy,
        podman,
        *podman_args,
        *leave,
        name,
    ]


def dump_seconds(stdout: str) -> float | None:
    """How long the dump took on the node (``DUMP``'s last line), None if it did not say."""
    for line in reversed(stdout.splitlines()):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "hetflow-dump":
            try:
                return max(0.0, float(parts[2]) - float(parts[1]))
            except ValueError:
                return None
    return None


def dump_error(stderr: str, stdout: str) -> str:
    """The words to give for a failed dump: podman's (CRIU's) last line, else srun's."""
    lines = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("hetflow-dump ")]
    own = [ln for ln in lines if not ln.startswith("srun: ")]
    return (own or lines or ["no message"])[-1]


def staging_of(job: Job) -> str | None:
    return next((m.source for m in job.container.mounts if m.target == "/out"), None)


def ready_image(job: Job) -> None:
    """Give ``job.restore``'s image the new attempt's identity (what is known before the job
    runs; the cgroup parent is the script's).  EngineError when the image cannot be read."""
    r = job.restore
    if r is None:
        return
    ready_for(r, name=job.name, labels=job.container.labels, staging=staging_of(job), replace=KEEP_EXITED)


_RESTORE = r"""# This attempt starts from attempt {from_attempt}'s checkpoint (``checkpoint``).
restored=0; rimage={image}; routputs={outputs}; rstage={staging}; criu={criu}
rdir="$jobdir/$name.restore"; rerr="$jobdir/$name.err"
restore_cgroup() {{  # the old attempt's cgroup parent in the image becomes this job's
  local new="${{usecg:-${{jobcg:-}}}}" old
  [ -n "$new" ] || return 0
  rm -rf "$rdir" && mkdir -p "$rdir" && tar -xf "$rimage" -C "$rdir" config.dump spec.dump || return 1
  old=$(sed -n 's/.*"cgroupParent": *"\([^"]*\)".*/\1/p' "$rdir/config.dump" | head -n 1)
  if [ -z "$old" ] || [ "$old" = "$new" ]; then return 0; fi
  old=$(printf '%s' "$old" | sed 's/[][\.*^$|]/\\&/g'); new=$(printf '%s' "$new" | sed 's/[\&|]/\\&/g')
  sed -i "s|$old|$new|g" "$rdir/config.dump" "$rdir/spec.dump" && tar -rf "$rimage" -C "$rdir" config.dump spec.dump
}}
restore_it() {{
  if [ -n "$rstage" ]; then
    mkdir -p "$rstage" && cp -a "$routputs/." "$rstage/" || {{ echo "cannot copy $routputs" > "$rerr"; return 1; }}
  fi
  restore_cgroup 2>"$rerr" || {{ echo "cannot set its cgroup: $(head -n 1 "$rerr")" >> "$rerr"; return 1; }}
  PATH="$criu:$PATH" "$podman" --hooks-dir "$hooks" container restore --import "$rimage" >/dev/null 2>"$rerr" \
    || return 1
  rlog=$("$podman" --hooks-dir "$hooks" inspect --format '{{{{.HostConfig.LogConfig.Path}}}}' "$name" 2>/dev/null)
  if [ -n "$rlog" ] && [ "$rlog" != "$log" ]; then  # podman logs a restored container to its own file
    mkdir -p "$(dirname "$log")"; ln -f "$rlog" "$log" 2>/dev/null || ln -sf "$rlog" "$log"
  fi
  return 0
}}
if restore_it; then
  restored=1
else
  cri "restore from $rimage failed ($(tail -n 1 "$rerr" 2>/dev/null)); this attempt starts from zero"
  "$podman" --hooks-dir "$hooks" rm -f --ignore "$name" >/dev/null 2>&1
  if [ -n "$rstage" ] && [ -d "$rstage" ]; then find "$rstage" -mindepth 1 -delete; fi
fi
rm -rf "$rdir"
if [ "$restored" = 1 ]; then
  "$podman" --hooks-dir "$hooks" wait "$name" > "$jobdir/$name.wait" 2>>"$rerr" &
else
"""

# After the wait: the restored container's code (podman wait's answer; scancel's SIGTERM reaches
# podman wait too: then stopped as the run path stops it and asked again), its log kept, itself removed.
_RESTORED_END = r"""if [ "$restored" = 1 ]; then
  code=$(head -n 1 "$jobdir/$name.wait" 2>/dev/null)
  case "$code" in ''|*[!0-9]*)
    if [ "$stopping" = 1 ]; then
      "$podman" --hooks-dir "$hooks" stop --ignore -t {stop_timeout} "$name" >/dev/null 2>&1
    fi
    code=$("$podman" --hooks-dir "$hooks" wait "$name" 2>>"$rerr" | head -n 1) ;;
  esac
  case "$code" in ''|*[!0-9]*) code=125 ;; esac
  if [ -L "$log" ]; then cp --remove-destination -- "$(readlink -- "$log")" "$log"; fi  # before podman rm
  "$podman" --hooks-dir "$hooks" rm -f --ignore "$name" >/dev/null 2>&1
fi
"""

# Every job: a dump that stopped the container (``MARKER``) ends the job as checkpointed, said
# in NAME.exit (the marker goes: the backend may have released the job's files already).
CHECKPOINTED_END = """if [ -e "$jobdir/$name{marker}" ]; then
  cri "checkpointed and stopped; the step goes on from this checkpoint in a new attempt"
  printf '%s %s {verdict}\\n' {code} "${{SLURM_JOB_ID:-}}" > "$exitf.$$" && mv -f "$exitf.$$" "$exitf"
  rm -f "$jobdir/$name{marker}"; exit {code}
fi
"""


def restore_start(job: Job, criu_dir: str) -> str:
    """The bash before the container starts (``podman run``, indented under an ``else``
    here when the job restores); "" for a job started afresh."""
    r = job.restore
    if r is None:
        return ""
    q = shlex.quote
    return _RESTORE.format(
        from_attempt=r.from_attempt,
        image=q(r.image),
        outputs=q(r.outputs),
        staging=q(staging_of(job) or ""),
        criu=q(criu_dir),
    )


def restore_end(job: Job, stop_timeout: int) -> tuple[str, str]:
    """(what closes ``restore_start``'s if, the bash after the wait); empty without a restore."""
    return ("fi\n", _RESTORED_END.format(stop_timeout=stop_timeout)) if job.restore is not None else ("", "")


def checkpointed_end() -> str:
    return CHECKPOINTED_END.format(marker=MARKER, code=CHECKPOINTED_CODE, verdict=VERDICT)
