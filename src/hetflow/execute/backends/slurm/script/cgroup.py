"""Keeping a step's container inside its Slurm job's cgroup (the bash the job scripts share).

podman (cgroup_manager = "cgroupfs") puts each container, and its conmon, in cgroups of
their own (``/libpod_parent/...``), outside the job's: Slurm's limits (cgroup.conf
ConstrainRAMSpace, ConstrainCores) would not hold the container and its kill
(proctrack/cgroup, at scancel or the time limit) would not reach it.  When the job has a
cgroup (``.../job_ID/step_batch/...`` in /proc/self/cgroup: cgroup/v1 in each hierarchy,
cgroup/v2 once), ``podman run --cgroup-parent`` puts the container's cgroup under the job's
(podman-run(1) --cgroup-parent: "Path to cgroups under which the cgroup for the container
will be created"), next to the job's steps.  A cluster without cgroups (proctrack/linuxproc,
like the local test cluster) has no such path and the option is left out.
"""

from __future__ import annotations

# Sets ``cgparent`` (an array) to podman's option; pasted into the job scripts as is.
JOB_CGROUP = r"""cgparent=()
jobcg=$(sed -n "s|^[^:]*:[^:]*:\(.*/job_${SLURM_JOB_ID:-none}\)\(/.*\)\{0,1\}$|\1|p" /proc/self/cgroup | head -n 1)
if [ -n "$jobcg" ]; then cgparent=(--cgroup-parent "$jobcg"); fi
"""


def job_cgroup(proc_self_cgroup: str, job_id: str) -> str | None:
    """What JOB_CGROUP finds, in Python (for tests and ``hetflow doctor``-like checks)."""
    for line in proc_self_cgroup.splitlines():
        path = line.split(":", 2)[-1]
        parts = path.split("/")
        if f"job_{job_id}" in parts:
            return "/".join(parts[: parts.index(f"job_{job_id}") + 1])
    return None
