"""Slurm's words about a job whose node failed, a queued job, and a job hetflow submitted
but never recorded, read through a fake client (the commands' outputs as Slurm 22.05
prints them): what ``SlurmBackend.poll`` makes of them.  And the job script's part that
keeps the container inside the job's cgroup."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.slurm import SlurmBackend, SlurmSettings, sbatch_args
from hetflow.execute.backends.slurm.backend import LOST_CODE
from hetflow.execute.backends.slurm.queue import QueueRow, parse_squeue
from hetflow.execute.backends.slurm.script.cgroup import JOB_CGROUP, job_cgroup
from hetflow.execute.backends.slurm.script.usage import refined
from hetflow.execute.backends.slurm.translate import job_script
from hetflow.execute.engine import ContainerSpec

RUN = "r1"
NAME = f"hf-{RUN}-s-1"
COMMENT = f"hetflow run={RUN}"


@dataclass
class FakeClient:
    """squeue's rows, ``scontrol show job``'s line and sacct's line, as given."""

    rows: list[QueueRow] = field(default_factory=list)
    shown: dict[str, str] = field(default_factory=dict)
    acct: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def squeue(self) -> list[QueueRow]:
        return self.rows

    def show_job(self, job_id: str) -> str | None:
        return self.shown.get(job_id)

    def sacct(self, job_id: str) -> str | None:
        return self.acct.get(job_id)

    def sacct_times(self, job_id: str) -> tuple[float | None, float | None]:
        start, _, end = self.acct.get(f"{job_id} times", "|").partition("|")
        return (float(start) if start else None), (float(end) if end else None)


def backend(
    tmp_path: Path, client: FakeClient, *, jobid: str | None = "7", exit_line: str | None = None
) -> SlurmBackend:
    b = SlurmBackend(SlurmSettings(workdir=str(tmp_path)), env={})
    b.client = client  # type: ignore[assignment]  # the seam: Slurm's commands
    run_dir = b.jobdir(RUN)
    run_dir.mkdir(parents=True)
    if jobid:
        (run_dir / f"{NAME}.jobid").write_text(jobid + "\n")
    if exit_line:
        (run_dir / f"{NAME}.exit").write_text(exit_line + "\n")
    return b


def row(state: str, reason: str = "None", node: str = "n1", job_id: str = "7") -> QueueRow:
    return parse_squeue(f"{job_id}|{NAME}|{state}|{reason}|{node}|(null)|{COMMENT}")[0]


@pytest.mark.parametrize(
    ("squeue", "shown", "acct", "status"),
    [
        ("NODE_FAIL", "JobId=7 JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0", None, "NODE_FAIL"),
        ("BOOT_FAIL", "JobId=7 JobState=BOOT_FAIL Reason=NodeDown ExitCode=0:0", None, "BOOT_FAIL"),
        ("PREEMPTED", "JobId=7 JobState=PREEMPTED Reason=None ExitCode=0:15", None, "PREEMPTED"),
        (None, None, "NODE_FAIL|0:0|n1", "NODE_FAIL"),  # slurmctld forgot it: accounting says
    ],
    ids=["node-fail", "boot-fail", "preempted", "node-fail-from-sacct"],
)
def test_a_job_its_node_ended_is_a_node_fault_not_a_success(
    tmp_path: Path, squeue: str | None, shown: str | None, acct: str | None, status: str
) -> None:
    client = FakeClient(
        rows=[row(squeue)] if squeue else [], shown={"7": shown} if shown else {}, acct={"7": acct} if acct else {}
    )
    st = backend(tmp_path, client).poll(RUN)[NAME]
    assert (st.running, st.status, st.node_failed, st.node) == (False, status, True, "n1")
    assert st.exit_code != 0  # never taken for a success, whatever ExitCode says
    assert st.exit_code == LOST_CODE or status == "PREEMPTED"


def test_an_exit_file_of_this_job_wins_over_the_node_fault(tmp_path: Path) -> None:
    """The container ran to its end before the node was declared down: its code is the
    attempt's (accepted once: the attempt is then released)."""
    client = FakeClient(rows=[row("NODE_FAIL")], shown={"7": "JobId=7 JobState=NODE_FAIL ExitCode=0:0"})
    st = backend(tmp_path, client, exit_line="0 7").poll(RUN)[NAME]
    assert (st.running, st.exit_code, st.node_failed) == (False, 0, False)


@pytest.mark.parametrize(
    ("state", "reason", "running", "node_failed"),
    [
        ("COMPLETING", "NodeDown", True, False),  # one node went down: wait for slurmctld's verdict
        ("NODE_FAIL", "NodeDown", False, True),  # then: a node fault, though the batch step wrote a code
        ("COMPLETING", "None", False, False),  # an ordinary end: the exit file's code
    ],
    ids=["completing-node-down", "node-fail", "completing"],
)
def test_a_gang_whose_node_went_down_is_a_node_fault_though_its_batch_step_wrote_a_code(
    tmp_path: Path, state: str, reason: str, running: bool, node_failed: bool
) -> None:
    # a gang's batch step on a surviving node folds its replicas' codes (137: one never
    # reported) and writes NAME.exit while the job is still COMPLETING (test_faults_slurm.py)
    st = backend(tmp_path, FakeClient(rows=[row(state, reason)]), exit_line="137 7").poll(RUN)[NAME]
    assert (st.running, st.node_failed) == (running, node_failed), st


def test_an_exit_file_of_an_earlier_job_under_the_name_is_not_this_jobs(tmp_path: Path) -> None:
    client = FakeClient(rows=[row("NODE_FAIL")], shown={"7": "JobId=7 JobState=NODE_FAIL ExitCode=0:0"})
    st = backend(tmp_path, client, exit_line="0 6").poll(RUN)[NAME]
    assert (st.exit_code, st.node_failed) == (LOST_CODE, True)


@pytest.mark.parametrize(
    ("state", "reason", "shown"),
    [
        ("PENDING", "Resources", "Resources"),
        ("PENDING", "None", "not yet scheduled"),  # before the scheduler's first pass
        ("RUNNING", "None", ""),
        ("COMPLETING", "None", "its processes are ending"),  # no exit file yet
    ],
    ids=["resources", "not-yet-scheduled", "running", "completing"],
)
def test_a_queued_job_says_why_it_waits(tmp_path: Path, state: str, reason: str, shown: str) -> None:
    st = backend(tmp_path, FakeClient(rows=[row(state, reason)])).poll(RUN)[NAME]
    assert (st.running, st.status, st.reason) == (True, state, shown)


def test_a_job_submitted_but_never_recorded_is_found_by_its_name(tmp_path: Path) -> None:
    """sbatch took it, then hetflow died before writing NAME.jobid: squeue still lists it
    under the attempt's deterministic name and the run's comment, so resume adopts it
    (``lifecycle.reconcile``) instead of submitting the attempt again."""
    client = FakeClient(rows=[row("RUNNING", job_id="9"), parse_squeue(f"8|{NAME}|RUNNING|None|n2|(null)|x")[0]])
    states = backend(tmp_path, client, jobid=None).poll(RUN)
    # not job 8: another run's
    assert states == {NAME: JobState(NAME, True, None, "RUNNING", "n1", (), "", native_id="9")}


def test_slurm_never_requeues_an_attempt_itself(tmp_path: Path) -> None:
    spec = ContainerSpec(name=NAME, image="img", command=("true",), user="1000:1000", labels={}, env={})
    job = Job(name=NAME, run_id=RUN, step="s", attempt=1, container=spec, cpus=1, memory=1 << 20)
    assert "--no-requeue" in sbatch_args(job, SlurmSettings(), [], tmp_path)


V1 = "12:memory:/slurm/uid_0/job_42/step_batch/task_0\n3:cpuset:/slurm/uid_0/job_42/step_batch\n1:name=systemd:/x\n"
V2 = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n"
V2_STEP = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_1\n"  # a gang's srun task
NONE = "0::/user.slice/user-0.slice/session-3.scope\n"  # proctrack/linuxproc: no job cgroup
OTHER = "0::/system.slice/slurmstepd.scope/job_421/step_batch/user/task_0\n"


@pytest.mark.parametrize(
    ("cgroups", "parent"),
    [
        (V1, "/slurm/uid_0/job_42"),
        (V2, "/system.slice/slurmstepd.scope/job_42"),
        (V2_STEP, "/system.slice/slurmstepd.scope/job_42"),
        (NONE, None),
        (OTHER, None),
    ],
    ids=["cgroup-v1", "cgroup-v2", "gang-task", "no-job-cgroup", "another-job"],
)
def test_the_container_cgroup_goes_under_the_jobs(tmp_path: Path, cgroups: str, parent: str | None) -> None:
    """What the job script's bash finds in /proc/self/cgroup is podman's --cgroup-parent."""
    proc = tmp_path / "cgroup"
    proc.write_text(cgroups)
    snippet = JOB_CGROUP.replace("/proc/self/cgroup", str(proc)) + 'printf "%s\\n" "${cgparent[@]}"\n'
    out = subprocess.run(
        ["bash", "-c", snippet], capture_output=True, text=True, env={"SLURM_JOB_ID": "42"}, check=True
    ).stdout.split()
    assert out == (["--cgroup-parent", parent] if parent else [])
    assert job_cgroup(cgroups, "42") == parent


def test_the_job_script_passes_the_cgroup_parent_to_podman_run(tmp_path: Path) -> None:
    spec = ContainerSpec(name=NAME, image="img", command=("true",), user="1000:1000", labels={}, env={})
    job = Job(name=NAME, run_id=RUN, step="s", attempt=1, container=spec, cpus=1, memory=1 << 20)
    script = job_script(job, SlurmSettings(), tmp_path, "/c.conf", "/hooks")
    run_line = next(line for line in script.splitlines() if '" run --rm' in line)
    assert '"${cgparent[@]}"' in run_line and "cgparent=()" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_a_jobs_env_values_are_in_a_private_file_beside_its_script_never_in_it(tmp_path: Path) -> None:
    """Step env (secrets among them) reach the node's podman through NAME.env (0600), so
    neither the job script nor the node's podman command line carries a value."""
    from hetflow.execute.backends.slurm.translate import env_file_of
    from hetflow.execute.engine import write_env_file_at

    secret = "s3cr3t-value"
    spec = ContainerSpec(name=NAME, image="img", command=("true",), user="1000:1000", labels={}, env={"TOKEN": secret})
    job = Job(name=NAME, run_id=RUN, step="s", attempt=1, container=spec, cpus=1, memory=1 << 20)
    script = job_script(job, SlurmSettings(), tmp_path, "/c.conf", "/hooks")
    assert secret not in script
    assert f"--env-file {env_file_of(tmp_path, NAME)}" in script
    written = write_env_file_at(env_file_of(tmp_path, NAME), spec.env)
    assert written.read_text() == f"TOKEN={secret}\n"
    assert written.stat().st_mode & 0o777 == 0o600
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


@pytest.mark.parametrize(
    ("line", "started", "ended"),
    [
        ("PENDING|Priority|(null)|N/A|N/A", None, None),
        ("PENDING|Resources|(null)|1795750000|N/A", None, None),  # %S of a pending job is a forecast
        ("RUNNING|None|n1|1795750000|1795753600", 1795750000.0, None),  # %e of a running one: its time limit
        ("COMPLETING|None|n1|1795750000|1795750009", 1795750000.0, 1795750009.0),
        ("COMPLETED|None|n1|1795750000|1795750009", 1795750000.0, 1795750009.0),
        ("CANCELLED|None|(null)|0|1795750009", None, 1795750009.0),  # cancelled while pending
    ],
    ids=["pending", "pending-forecast", "running", "completing", "completed", "cancelled-pending"],
)
def test_squeue_times_are_slurms_start_and_end_only_once_they_happened(
    line: str, started: float | None, ended: float | None
) -> None:
    state, reason, node, start, end = line.split("|")
    (r,) = parse_squeue(f"7|{NAME}|{state}|{reason}|{node}|(null)|{COMMENT}|{start}|{end}")
    assert (r.comment, r.started(), r.ended()) == (COMMENT, started, ended)


@pytest.mark.parametrize(
    ("rows", "acct", "times"),
    [
        (  # slurmctld's record (squeue's %S and %e) first
            parse_squeue(f"7|{NAME}|COMPLETED|None|n1|(null)|{COMMENT}|1795750001|1795750008"),
            {"7 times": "1795750000|1795750009"},
            (1795750001.0, 1795750008.0),
        ),
        ([], {"7 times": "1795750000|1795750009"}, (1795750000.0, 1795750009.0)),
        ([], {}, (None, None)),  # no accounting: unknown
    ],
    ids=["squeue", "forgotten-sacct", "forgotten-no-accounting"],
)
def test_a_finished_jobs_times_come_from_squeue_then_accounting(
    tmp_path: Path, rows: list[QueueRow], acct: dict[str, str], times: tuple[float | None, float | None]
) -> None:
    st = backend(tmp_path, FakeClient(rows=rows, acct=acct), exit_line="0 7").poll(RUN)[NAME]
    assert (st.running, st.exit_code, (st.started, st.ended)) == (False, 0, times)


@pytest.mark.parametrize(
    ("slurm", "own", "shown"),
    [
        (1795750000.0, "1795750000.42", 1795750000.42),  # the same second: the job's own stamp
        (1795750001.0, 1795750000.93, 1795750000.93),  # an end stamped just before Slurm's
        (1795750000.0, "1795750007.5", 1795750000.0),  # a node's clock off: Slurm's
        (1795750000.0, None, 1795750000.0),
        (None, "1795750000.42", None),  # Slurm has not started it: no stamp makes it started
    ],
    ids=["refined", "end-before", "clock-off", "no-stamp", "not-started"],
)
def test_slurms_whole_seconds_are_refined_by_the_jobs_own_stamps(
    slurm: float | None, own: float | str | None, shown: float | None
) -> None:
    assert refined(slurm, own) == shown
