"""What a Slurm job's container used, measured on its node the way local podman's are
(``execute.cgroups``), and read back by the backend (``SlurmBackend.usage``).

Slurm's own figures do not fit: the test cluster has no accounting (jobacct_gather/none,
accounting_storage/none), and where accounting runs, sacct's MaxRSS and TotalCPU count the
job's steps, while podman's container runs under conmon, outside the batch step's processes
and cgroup.  So the job script gives the container a parent cgroup of its own,
``JOBCG/NAME`` (under the job's cgroup where Slurm made one, ``/hetflow/NAME`` where it did
not: ``cgroup``), with ``--cgroups=no-conmon`` so podman's monitor is not charged to the
step.  The parent's counters are hierarchical and outlive the container: after it exits the
script reads the peak memory and CPU time (cgroup v1: memory.max_usage_in_bytes,
cpuacct.usage; v2: memory.peak, cpu.stat usage_usec; kernel docs cgroup-v1/memory.rst,
admin-guide/cgroup-v2.rst), removes the parent, and writes NAME.usage beside the job's
other files::

    peak_memory=BYTES   cpu_ns=NANOSECONDS   started=EPOCH   ended=EPOCH

``started``/``ended`` are the node's clock just before ``podman run`` and as it returns
(the container's run, as the trace's start and end).  Where the script may not make the
cgroup (a job running as a user without cgroup delegation) the figures are left out and
stay unknown (NULL), never a guess.
"""

from __future__ import annotations

from pathlib import Path

from hetflow.execute.engine import Usage

# Pasted after ``cgroup.JOB_CGROUP`` (which may have set ``cgparent`` to the job's cgroup);
# sets ``usecg`` (empty: not measured) and ``cgparent``, and stamps the start.
MEASURE_START = r"""usecg=""; cgmem=""; cgcpu=""; cgv2=""
cgmem=$(awk '$3=="cgroup" && $4 ~ /(^|,)memory(,|$)/ {print $2; exit}' /proc/self/mounts)
cgcpu=$(awk '$3=="cgroup" && $4 ~ /(^|,)cpuacct(,|$)/ {print $2; exit}' /proc/self/mounts)
if [ -z "$cgmem" ]; then cgv2=$(awk '$3=="cgroup2" {print $2; exit}' /proc/self/mounts); fi
want="${jobcg:-/hetflow}/$name"
if [ -n "$cgmem" ] && [ -n "$cgcpu" ] && [ -w "$cgmem${jobcg:-/}" ]; then
  usecg=$want  # v1: runc makes the path in every hierarchy
elif [ -n "$cgv2" ] && mkdir -p "$cgv2$want" 2>/dev/null; then
  usecg=$want; d=$cgv2
  for part in $(dirname "$want" | tr '/' ' '); do  # v2: each parent enables memory and cpu below it
    echo "+memory +cpu" > "$d/cgroup.subtree_control" 2>/dev/null; d="$d/$part"
  done
  echo "+memory +cpu" > "$d/cgroup.subtree_control" 2>/dev/null
fi
if [ -n "$usecg" ]; then cgparent=(--cgroups=no-conmon --cgroup-parent "$usecg"); fi
printf 'started=%s\n' "$(date +%s.%N)" > "$jobdir/$name.usage.$$"
"""

# Pasted after the container has exited: the counters into NAME.usage, the cgroup removed.
MEASURE_END = r"""printf 'ended=%s\n' "$(date +%s.%N)" >> "$jobdir/$name.usage.$$"
if [ -n "$usecg" ]; then
  if [ -n "$cgv2" ]; then
    peak=$(cat "$cgv2$usecg/memory.peak" 2>/dev/null)
    cpu=$(awk '$1=="usage_usec" {print $2 "000"}' "$cgv2$usecg/cpu.stat" 2>/dev/null)
  else
    peak=$(cat "$cgmem$usecg/memory.max_usage_in_bytes" 2>/dev/null)
    cpu=$(cat "$cgcpu$usecg/cpuacct.usage" 2>/dev/null)
  fi
  printf 'peak_memory=%s\ncpu_ns=%s\n' "${peak:-}" "${cpu:-}" >> "$jobdir/$name.usage.$$"
  for root in $(awk '$3 ~ /^cgroup2?$/ {print $2}' /proc/self/mounts); do
    if [ -d "$root$usecg" ]; then find "$root$usecg" -depth -type d -exec rmdir {} + 2>/dev/null; fi
  done
fi
mv -f "$jobdir/$name.usage.$$" "$jobdir/$name.usage"
"""


def read_usage(path: Path) -> Usage:
    """NAME.usage as a Usage; what is missing or unreadable stays None."""
    try:
        text = path.read_text()
    except OSError:
        return Usage()
    fields = dict(line.partition("=")[::2] for line in text.splitlines())
    peak, cpu_ns = fields.get("peak_memory", ""), fields.get("cpu_ns", "")
    return Usage(
        peak_memory=int(peak) if peak.isdigit() else None,
        cpu_seconds=int(cpu_ns) / 1e9 if cpu_ns.isdigit() else None,
        started=_seconds(fields.get("started", "")),
        ended=_seconds(fields.get("ended", "")),
    )


def refined(slurm: float | None, own: float | str | None) -> float | None:
    """Slurm's StartTime or EndTime (whole seconds) to the fraction, from the job's own stamp
    on its node (NAME.start's ``started``, NAME.usage's ``ended``) where the two agree to
    within a second; Slurm's where they do not (a node's clock off) or there is no stamp."""
    mine = _seconds(own) if isinstance(own, str) else own
    return mine if slurm is not None and mine is not None and abs(mine - slurm) < 1 else slurm


def _seconds(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None
