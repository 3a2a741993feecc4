"""What Slurm says about jobs, parsed: squeue rows, scontrol's and sacct's words (pure)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hetflow.execute.backends.common import signal_code

# squeue's columns: job id, name, state, reason, node, dependency, comment (squeue(1), -o);
# then the job's start and end time, as epoch seconds under TIME_FORMAT.
SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%E|%k|%S|%e"
# Slurm's clients print times through strftime(3) with this format (squeue(1),
# SLURM_TIME_FORMAT): "%s", epoch seconds, reads the same in every time zone.
TIME_FORMAT = {"SLURM_TIME_FORMAT": "%s"}
# Job states (squeue %T) in which a job has not ended (squeue(1), JOB STATE CODES).
ACTIVE_STATES = frozenset(
    {
        "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT",
    }
)  # fmt: skip
NEVER_SATISFIED = "DependencyNeverSatisfied"
# Job states (squeue %T, sacct State) of a job ended by its node or by the scheduler, not by
# its own program (squeue(1) JOB STATE CODES): hetflow runs the step again (JobState.node_failed).
NODE_FAULTS = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})


@dataclass(frozen=True)
class QueueRow:
    """One line of squeue."""

    job_id: str
    name: str
    state: str
    reason: str
    node: str
    dependency: str
    comment: str
    # squeue's %S and %e: Slurm's StartTime and EndTime ("N/A", or an expected time, while
    # the job waits or runs: ``started``, ``ended`` say which count)
    start: str = ""
    end: str = ""

    def started(self) -> float | None:
        """When Slurm started the job; None while it is pending (%S is then a forecast)."""
        return None if self.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD") else engine_time(self.start)

    def ended(self) -> float | None:
        """When the job ended; None while it runs (%e is then its time limit's end)."""
        return None if self.state in ACTIVE_STATES and self.state != "COMPLETING" else engine_time(self.end)


def parse_squeue(stdout: str) -> list[QueueRow]:
    rows = []
    for line in stdout.splitlines():
        parts = line.split("|", 6)
        if len(parts) == 7:
            comment, *times = parts[6].rsplit("|", 2)  # the times follow the comment
            start, end = (t.strip() for t in times) if len(times) == 2 else ("", "")
            job_id, name, state, reason, node, dependency = (p.strip() for p in parts[:6])
            rows.append(QueueRow(job_id, name, state, reason, node, dependency, comment.strip(), start, end))
    return rows


def engine_time(text: str) -> float | None:
    """A time Slurm printed under TIME_FORMAT (epoch seconds); None for N/A, Unknown, NONE, 0."""
    return float(text) if text.isdigit() and int(text) > 0 else None


def job_number(job_id: str) -> int:
    """The number of a job id ("12", "12_3" for an array task, "12+0" for a het job)."""
    m = re.match(r"\d+", job_id)
    return int(m[0]) if m else 0


def run_rows(rows: list[QueueRow], run_id: str) -> dict[str, QueueRow]:
    """The run's jobs, by name; the newest submission of a name wins."""
    prefix, comment = f"hf-{run_id}-", f"hetflow run={run_id}"
    out: dict[str, QueueRow] = {}
    for r in rows:
        if r.name.startswith(prefix) and r.comment == comment:
            old = out.get(r.name)
            if old is None or job_number(r.job_id) > job_number(old.job_id):
                out[r.name] = r
    return out


def dependency_names(dependency: str, names: Mapping[str, str]) -> str:
    """``afterok:12(failed),afterok:13(unfulfilled)`` -> the parents' job names."""
    ids = re.findall(r"(\d+)(?:\([^)]*\))?", dependency.split(":", 1)[-1]) if dependency else []
    found = [names.get(i, f"job {i}") for i in ids]
    return ", ".join(found) or "a parent job"


def scontrol_field(text: str, key: str) -> str:
    """``KEY=VALUE`` from ``scontrol --oneliner show job``."""
    m = re.search(rf"\b{key}=(\S+)", text)
    return m[1] if m else ""


def scontrol_exit(text: str) -> int | None:
    """The job's exit code from scontrol's ``ExitCode=CODE:SIGNAL``."""
    m = re.search(r"\bExitCode=(\d+):(\d+)", text)
    return signal_code(int(m[1]), int(m[2])) if m else None


def sacct_row(stdout: str) -> tuple[str, str, int] | None:
    """(state, node list, exit code) from ``sacct -n -P -X --format=State,ExitCode,NodeList``."""
    fields = stdout.strip().split("|")
    if len(fields) != 3:
        return None
    ret, _, sig = fields[1].partition(":")
    return fields[0].split()[0], fields[2], signal_code(int(ret), int(sig) if sig.isdigit() else 0)


def end_reason(state: str) -> str:
    return {
        "CANCELLED": "cancelled (scancel)",
        "TIMEOUT": "Slurm's time limit was reached",
        "NODE_FAIL": "the node failed",
        "OUT_OF_MEMORY": "out of memory (Slurm)",
        "PREEMPTED": "preempted",
        "BOOT_FAIL": "the node failed to boot",
        "DEADLINE": "Slurm's deadline passed",
    }.get(state, "")
