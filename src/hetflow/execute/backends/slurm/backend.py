"""Slurm: one batch job per step attempt; Slurm orders them (afterok) and assigns GPUs (gres).

    submit  sbatch --parsable --job-name=hf-RUN-STEP-N --comment="hetflow run=RUN"
                   --dependency=afterok:ID[:ID...] --kill-on-invalid-dep=yes ... JOBDIR/NAME.sh
    poll    squeue --me --states=all     (what slurmctld remembers: MinJobAge after the end)
            + JOBDIR/NAME.exit           (the container's exit code, written by the job script)
    cancel  scancel ID...                (the script's TERM trap runs `podman stop`)

Every node must see the work directory; a run's job files live in ``WORKDIR/RUN``::

    NAME.sh     the batch script           NAME.jobid  Slurm's job id (adoption after a restart)
    NAME.start  node, job id, SLURM_JOB_GPUS, written when the job starts
    NAME.exit   "CODE JOBID", written last (atomically) by the job script
    NAME.out    the script's own output: podman's errors, slurmstepd's CANCELLED notes
    NAME.err    podman's stderr (its own messages; the container's streams go to the log)

Exit codes come from the ``.exit`` file first: it is the container's own code and it outlives
slurmctld's memory of the job, which needs no accounting database (sacct answers only where
slurmdbd runs).  Slurm's own ``ExitCode`` (``scontrol show job``) and ``sacct`` are fallbacks
for jobs that ended before the script could write the file.

The container's output goes to ``job.container.log_path`` in CRI format (podman's k8s-file
driver, as with the local backend); the script adds its own messages there as CRI records
(``TIME stderr F hetflow: ...``) when the container could not be started.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hetflow.config import containers_conf, find_engine, hetflow_home
from hetflow.errors import EngineError
from hetflow.execute.backends.base import Capabilities, Job, JobState
from hetflow.execute.backends.slurm.settings import SlurmSettings
from hetflow.execute.backends.slurm.translate import gres_type, job_script, sbatch_args
from hetflow.execute.engine import CliEngine

# Job states (squeue %T) in which a job has not ended (squeue(1), JOB STATE CODES).
ACTIVE_STATES = frozenset(
    {
        "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT",
    }
)  # fmt: skip
NEVER_SATISFIED = "DependencyNeverSatisfied"
# Codes for jobs that ended with no exit code of their own, as a shell would report them.
CANCELLED_CODE = 143  # 128 + SIGTERM: scancel before the script could record anything
TIMEOUT_CODE = 124  # timeout(1)'s code
LOST_CODE = 255


@dataclass(frozen=True)
class _Row:
    """One line of squeue."""

    job_id: str
    name: str
    state: str
    reason: str
    node: str
    dependency: str
    comment: str


class SlurmBackend:
    capabilities = Capabilities(name="slurm", holds_dependencies=True, assigns_gpus=True, multi_node=True)

    def __init__(self, settings: SlurmSettings | None = None, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings or SlurmSettings()
        self._env = dict(os.environ if env is None else env)
        if self.settings.slurm_conf:
            self._env["SLURM_CONF"] = self.settings.slurm_conf
        self.workdir = Path(self.settings.workdir or hetflow_home(self._env) / "slurm")
        self._ids: dict[str, str] = {}  # job name -> Slurm job id, for jobs this instance submitted
        self._final: dict[tuple[str, str], JobState] = {}  # (name, job id) -> Slurm's verdict
        self._released: set[str] = set()
        self._sacct: bool | None = None  # does accounting answer?

    # --- commands -----------------------------------------------------------------------

    def _cmd(self, name: str) -> str:
        return str(Path(self.settings.bin_dir) / name) if self.settings.bin_dir else name

    def _run(self, args: list[str], *, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(
                [self._cmd(args[0]), *args[1:]],
                capture_output=True,
                text=True,
                env=self._env,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(f"{args[0]} did not answer within {timeout:.0f}s; is slurmctld up? ({_HOW})") from None
        except OSError as exc:
            raise EngineError(
                f"cannot run {args[0]}: {exc.strerror}; install Slurm's client commands "
                "(apt-get install -y slurm-client) or set slurm bin_dir"
            ) from None
        if check and proc.returncode != 0:
            raise EngineError(f"{args[0]} failed: {_last_line(proc)}")
        return proc

    def check(self) -> None:
        conf = self._env.get("SLURM_CONF")
        if conf and not Path(conf).is_file():
            # Slurm's clients retry for about a minute before saying so
            raise EngineError(f"SLURM_CONF names {conf}, which does not exist; {_HOW}")
        proc = self._run(["sinfo", "--noheader", "--format=%P %a"], timeout=30, check=False)
        if proc.returncode != 0:
            raise EngineError(f"Slurm does not answer (sinfo: {_last_line(proc)}); {_HOW}")

    def image_exists(self, image: str) -> bool:
        """Asked of this machine's podman: the nodes are expected to share its image store or
        to hold the same images (``podman run --pull never`` on the node says otherwise)."""
        try:
            return CliEngine(find_engine(self._env), self._env).image_exists(image)
        except EngineError:
            return True  # no engine here: the node's podman decides

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None  # the runner polls (squeue is cheap)

    # --- files --------------------------------------------------------------------------

    def jobdir(self, run_id: str) -> Path:
        return self.workdir / run_id

    def _node_files(self) -> tuple[str, str]:
        """The containers.conf and the empty hooks directory the nodes use (shared)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        hooks = self.workdir / "hooks.d"  # empty: no OCI hook may add GPUs (engine.CliEngine)
        hooks.mkdir(exist_ok=True)
        if self.settings.containers_conf:
            return self.settings.containers_conf, str(hooks)
        conf = self.workdir / "containers.conf"
        text = containers_conf(self._env).read_text()
        if not conf.exists() or conf.read_text() != text:
            conf.write_text(text)
        return str(conf), str(hooks)

    # --- submit -------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        jobdir = self.jobdir(job.run_id)
        jobdir.mkdir(parents=True, exist_ok=True)
        conf, hooks = self._node_files()
        deps = self._dependency_ids(job) if job.depends_on else []
        for suffix in (".exit", ".start", ".err", ".jobid"):
            (jobdir / f"{job.name}{suffix}").unlink(missing_ok=True)
        script = jobdir / f"{job.name}.sh"
        script.write_text(job_script(job, self.settings, jobdir, conf, hooks))
        args = sbatch_args(job, self.settings, deps, jobdir)
        proc = self._run(["sbatch", *args, str(script)], check=False)
        if proc.returncode != 0:
            hint = ""
            if "gres" in proc.stderr.lower() and job.gpu_model:
                hint = (
                    f" ({job.gpu_model!r} asked for gres type "
                    f"{gres_type(job.gpu_model, self.settings.gres_types)!r}: "
                    "map it to the cluster's type with slurm gres_types)"
                )
            raise EngineError(f"sbatch refused {job.name}: {_last_line(proc)}{hint}")
        job_id = proc.stdout.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"
        self._ids[job.name] = job_id
        (jobdir / f"{job.name}.jobid").write_text(job_id + "\n")
        self._released.discard(job.name)

    def _dependency_ids(self, job: Job) -> list[str]:
        """Slurm job ids for the parents.  A parent Slurm no longer remembers counts as done
        when its exit file says 0: afterok on a forgotten id is ignored by Slurm (22.05), so a
        failed one must not be passed on."""
        listed = sorted(self._squeue(), key=lambda r: int(_num(r.job_id)))
        known = {r.job_id for r in listed}
        rows = {r.name: r.job_id for r in listed}  # the newest submission of a name wins
        ids = []
        for parent in job.depends_on:
            jid = self._ids.get(parent) or _read(self.jobdir(job.run_id) / f"{parent}.jobid") or rows.get(parent)
            if jid and jid in known:
                ids.append(jid)
                continue
            code = _exit_code(self.jobdir(job.run_id) / f"{parent}.exit")
            if code == 0:
                continue
            if code is None:
                raise EngineError(f"{job.name} depends on {parent}, which Slurm does not know")
            raise EngineError(f"{job.name} depends on {parent}, which already failed (exit {code})")
        return ids

    # --- poll ---------------------------------------------------------------------------

    def _squeue(self) -> list[_Row]:
        proc = self._run(["squeue", "--me", "--noheader", "--states=all", "--format=%i|%j|%T|%r|%N|%E|%k"], timeout=60)
        rows = []
        for line in proc.stdout.splitlines():
            parts = line.split("|", 6)
            if len(parts) == 7:
                rows.append(_Row(*(p.strip() for p in parts)))
        return rows

    def _run_rows(self, run_id: str) -> dict[str, _Row]:
        """The run's jobs in slurmctld, by name; the newest submission of a name wins."""
        prefix, comment = f"hf-{run_id}-", f"hetflow run={run_id}"
        out: dict[str, _Row] = {}
        for r in self._squeue():
            if r.name.startswith(prefix) and r.comment == comment:
                old = out.get(r.name)
                if old is None or int(_num(r.job_id)) > int(_num(old.job_id)):
                    out[r.name] = r
        return out

    def poll(self, run_id: str) -> dict[str, JobState]:
        jobdir = self.jobdir(run_id)
        rows = self._run_rows(run_id)
        names_by_id = {r.job_id: r.name for r in rows.values()}
        submitted = {p.name[: -len(".jobid")] for p in jobdir.glob("*.jobid")} if jobdir.is_dir() else set()
        out: dict[str, JobState] = {}
        for name in sorted((set(rows) | submitted) - self._released):
            row = rows.get(name)
            job_id = row.job_id if row else (_read(jobdir / f"{name}.jobid") or "")
            out[name] = self._state(name, job_id, row, jobdir, names_by_id)
        return out

    def _state(self, name: str, job_id: str, row: _Row | None, jobdir: Path, names: Mapping[str, str]) -> JobState:
        done = _read_exit(jobdir / f"{name}.exit", job_id)
        start = _read_start(jobdir / f"{name}.start")
        node = (row.node if row and row.node and row.node != "(null)" else None) or start.get("node") or None
        gpus = tuple(int(g) for g in start.get("gpus", "").split(",") if g.isdigit())
        if row is not None and row.state in ACTIVE_STATES and not (done is not None and row.state == "COMPLETING"):
            reason = "" if row.reason in ("None", "(null)") else row.reason
            if reason == "Dependency":
                reason = f"waiting for {_dependency_names(row.dependency, names)}"
            return JobState(name, True, None, row.state, node, gpus, reason)
        if done is not None:
            status = row.state if row is not None else ("COMPLETED" if done == 0 else "FAILED")
            return JobState(name, False, done, status, node, gpus, _end_reason(status))
        if row is not None and row.state == "CANCELLED" and row.reason == NEVER_SATISFIED:
            parents = _dependency_names(row.dependency, names)
            why = f"{NEVER_SATISFIED}: {parents} did not succeed; Slurm cancelled this job without running it"
            return JobState(name, False, None, "CANCELLED", None, (), why, dependency_failed=True)
        key = (name, job_id)
        if key not in self._final:
            self._final[key] = self._verdict(name, job_id, row)
        return self._final[key]

    def _verdict(self, name: str, job_id: str, row: _Row | None) -> JobState:
        """A finished job that left no exit file: ask slurmctld, then accounting."""
        state, node = (row.state, row.node) if row else ("", None)
        code: int | None = None
        if job_id:
            proc = self._run(["scontrol", "--oneliner", "show", "job", job_id], check=False)
            m = re.search(r"\bExitCode=(\d+):(\d+)", proc.stdout)
            if proc.returncode == 0 and m:
                code = int(m[1]) or (128 + int(m[2]) if int(m[2]) else 0)
                state = _field(proc.stdout, "JobState") or state
            elif self._accounting():
                acct = self._run(
                    ["sacct", "-n", "-P", "-X", "-j", job_id, "--format=State,ExitCode,NodeList"], check=False
                )
                fields = acct.stdout.strip().split("|") if acct.returncode == 0 else []
                if len(fields) == 3:
                    state, node = fields[0].split()[0], fields[2]
                    ret, _, sig = fields[1].partition(":")
                    code = int(ret) or (128 + int(sig) if sig.isdigit() and int(sig) else 0)
        if not state:
            return JobState(
                name,
                False,
                None,
                "UNKNOWN",
                None,
                (),
                f"Slurm no longer knows job {job_id or '?'} (it ended more than MinJobAge ago) "
                "and the job left no exit file: it did not run to its end",
            )
        if state == "CANCELLED" and not code:
            code = CANCELLED_CODE
        elif state == "TIMEOUT":
            code = TIMEOUT_CODE
        elif code is None or (code == 0 and state != "COMPLETED"):
            code = LOST_CODE
        return JobState(name, False, code, state, node or None, (), _end_reason(state))

    def _accounting(self) -> bool:
        if self._sacct is None:
            self._sacct = self._run(["sacct", "-n", "-X", "-j", "1"], check=False).returncode == 0
        return self._sacct

    # --- cancel / release ---------------------------------------------------------------

    def _ids_for(self, names: Sequence[str]) -> list[str]:
        wanted = set(names)
        by_name: dict[str, str] = {}
        for r in self._squeue():
            if r.name in wanted and r.state in ACTIVE_STATES:
                by_name[r.name] = r.job_id
        return sorted(set(by_name.values()) | {self._ids[n] for n in wanted if n in self._ids and n not in by_name})

    def cancel(self, names: Iterable[str]) -> None:
        ids = self._ids_for(list(names))
        if ids:
            # scancel: SIGTERM to every process of the job, SIGKILL after KillWait (scancel(1))
            self._run(["scancel", *ids], check=False)

    def release(self, names: Iterable[str]) -> None:
        """Forget finished jobs: their files go, except a non-empty NAME.out (diagnostics)."""
        for name in names:
            self._released.add(name)
            self._ids.pop(name, None)
            run_dirs = [d for d in self.workdir.glob("*") if (d / f"{name}.jobid").exists()]
            for d in run_dirs:
                for suffix in (".sh", ".exit", ".start", ".err", ".jobid"):
                    (d / f"{name}{suffix}").unlink(missing_ok=True)
                out = d / f"{name}.out"
                if out.exists() and out.stat().st_size == 0:
                    out.unlink()


_HOW = (
    "point SLURM_CONF at the cluster's slurm.conf (or set slurm slurm_conf), make sure munged runs "
    "(systemctl start munge) with the cluster's key, or start a local test cluster with "
    "`python -m demo.slurm_cluster start`"
)


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()
    return lines[-1]


def _num(job_id: str) -> str:
    m = re.match(r"\d+", job_id)
    return m[0] if m else "0"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _exit_code(path: Path) -> int | None:
    text = _read(path)
    return int(text.split()[0]) if text and text.split()[0].lstrip("-").isdigit() else None


def _read_exit(path: Path, job_id: str) -> int | None:
    """The exit code in NAME.exit, if that file belongs to this job id (not an earlier one)."""
    text = _read(path)
    if not text:
        return None
    parts = text.split()
    if not parts[0].isdigit() or (job_id and len(parts) > 1 and parts[1] != job_id):
        return None
    return int(parts[0])


def _read_start(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def _field(text: str, key: str) -> str:
    m = re.search(rf"\b{key}=(\S+)", text)
    return m[1] if m else ""


def _dependency_names(dependency: str, names: Mapping[str, str]) -> str:
    """``afterok:12(failed),afterok:13(unfulfilled)`` -> the parents' job names."""
    ids = re.findall(r"(\d+)(?:\([^)]*\))?", dependency.split(":", 1)[-1]) if dependency else []
    found = [names.get(i, f"job {i}") for i in ids]
    return ", ".join(found) or "a parent job"


def _end_reason(state: str) -> str:
    return {
        "CANCELLED": "cancelled (scancel)",
        "TIMEOUT": "Slurm's time limit was reached",
        "NODE_FAIL": "the node failed",
        "OUT_OF_MEMORY": "out of memory (Slurm)",
        "PREEMPTED": "preempted",
        "BOOT_FAIL": "the node failed to boot",
        "DEADLINE": "Slurm's deadline passed",
    }.get(state, "")
