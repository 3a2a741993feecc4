"""The Slurm backend: submit (sbatch), watch (squeue + the job's exit file), cancel
(scancel), clean up (the job files); what each job file holds is in the package's docstring.
Times are Slurm's own (squeue's StartTime and EndTime: ``JobState.started``, ``.ended``);
what a job used is measured by its script on the node (``usage``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from hetflow.config import find_engine, hetflow_home
from hetflow.errors import EngineError
from hetflow.execute.backends import common
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.local.criupodman import DUMP_TIMEOUT
from hetflow.execute.backends.local.podman import CliEngine
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.backends.slurm import checkpoint, jobfiles, queue
from hetflow.execute.backends.slurm.client import SlurmClient, last_line
from hetflow.execute.backends.slurm.gang import failed_replica, gang_scripts, replica_env_file
from hetflow.execute.backends.slurm.plugin import PLUGIN
from hetflow.execute.backends.slurm.queue import ACTIVE_STATES, NEVER_SATISFIED, NODE_FAULTS, QueueRow
from hetflow.execute.backends.slurm.script.usage import read_usage, refined
from hetflow.execute.backends.slurm.settings import SlurmSettings, gres_type
from hetflow.execute.backends.slurm.translate import env_file_of, job_script, sbatch_args
from hetflow.execute.checkpoint.criu import find_criu
from hetflow.execute.engine import ContainerEngine, Usage, write_env_file_at

# Codes for jobs that ended with no exit code of their own, as a shell would report them.
CANCELLED_CODE = common.TERMINATED_CODE  # scancel before the script could record anything
TIMEOUT_CODE = common.TIMEOUT_CODE
LOST_CODE = common.LOST_CODE


class SlurmBackend:
    capabilities = PLUGIN.capabilities

    @classmethod
    def from_settings(cls, settings: RunSettings, engine: ContainerEngine | None) -> SlurmBackend:
        """The ``slurm:`` section; the nodes run their own podman (``engine`` is this machine's)."""
        return cls(SlurmSettings.from_backend(settings))

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """None: the image is run on the nodes, whose engine is not asked here."""
        return None

    def __init__(self, settings: SlurmSettings | None = None, env: Mapping[str, str] | None = None) -> None:
        self.settings = settings or SlurmSettings()
        self.client = SlurmClient(self.settings, env)
        self.workdir = Path(self.settings.workdir or hetflow_home(self.client.env) / "slurm")
        self._ids: dict[str, str] = {}  # job name -> Slurm job id, for jobs this instance submitted
        self._final: dict[tuple[str, str], JobState] = {}  # (name, job id) -> Slurm's verdict
        self._released: set[str] = set()

    def check(self) -> None:
        self.client.check()

    def image_exists(self, image: str) -> bool:
        """Asked of this machine's podman: the nodes are expected to share its image store or
        to hold the same images (``podman run --pull never`` on the node says otherwise)."""
        try:
            return CliEngine(find_engine(self.client.env), self.client.env).image_exists(image)
        except EngineError:
            return True  # no engine here: the node's podman decides

    def image_id(self, image: str) -> str | None:
        """This machine's podman's answer, on the same assumption as ``image_exists``."""
        return common.host_image_id(image, self.client.env)

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None  # the runner polls (squeue is cheap)

    def jobdir(self, run_id: str) -> Path:
        return self.workdir / run_id

    def _squeue(self) -> list[QueueRow]:
        return self.client.squeue()

    # --- submit -------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        jobdir = self.jobdir(job.run_id)
        jobdir.mkdir(parents=True, exist_ok=True)
        conf, hooks = jobfiles.node_files(self.workdir, self.settings.containers_conf, self.client.env)
        deps = self._dependency_ids(job) if job.depends_on else []
        jobfiles.clear(jobdir, job.name)
        script = jobdir / f"{job.name}.sh"
        if job.gang is not None:
            for rank, replica in enumerate(job.ranks or (job.container,)):
                if replica.env:
                    write_env_file_at(replica_env_file(jobdir, job.name, rank), replica.env)
            batch, task = gang_scripts(job, self.settings, jobdir, conf, hooks)
            (jobdir / f"{job.name}.task.sh").write_text(task)
            script.write_text(batch)
        else:
            if job.container.env:
                write_env_file_at(env_file_of(jobdir, job.name), job.container.env)
            if job.restore is not None:
                checkpoint.ready_image(job)  # EngineError: the launcher submits it afresh
            script.write_text(job_script(job, self.settings, jobdir, conf, hooks, self._criu_dir()))
        args = sbatch_args(job, self.settings, deps, jobdir)
        proc = self.client.run(["sbatch", *args, str(script)], check=False)
        if proc.returncode != 0:
            hint = ""
            if "gres" in proc.stderr.lower() and job.gpu_model:
                hint = (
                    f" ({job.gpu_model!r} asked for gres type "
                    f"{gres_type(job.gpu_model, self.settings.gres_types)!r}: "
                    "map it to the cluster's type with slurm gres_types)"
                )
            raise EngineError(f"sbatch refused {job.name}: {last_line(proc)}{hint}")
        job_id = proc.stdout.strip().split(";")[0]  # --parsable: "ID" or "ID;CLUSTER"
        self._ids[job.name] = job_id
        (jobdir / f"{job.name}.jobid").write_text(job_id + "\n")
        self._released.discard(job.name)

    # --- checkpoint ---------------------------------------------------------------------

    def _criu_dir(self) -> str:
        if self.settings.criu_dir:
            return self.settings.criu_dir
        found = find_criu(self.client.env)
        return str(Path(found).parent) if found else ""

    def checkpoint(
        self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
    ) -> float:
        """Dump job ``name``'s container on its node, as a step of the job (``checkpoint``);
        the seconds the dump took there.  EngineError with podman's (CRIU's) words."""
        found = sorted(self.workdir.glob(f"*/{name}.jobid"))
        job_id = self._ids.get(name) or (jobfiles.read(found[0]) if found else None)
        if not job_id or not found:
            raise EngineError(f"cannot checkpoint {name}: no Slurm job of that name was submitted from {self.workdir}")
        criu = self._criu_dir()
        if not criu:
            raise EngineError(f"cannot checkpoint {name}: no CRIU found; run 'make criu' or set slurm criu_dir")
        conf, hooks = jobfiles.node_files(self.workdir, self.settings.containers_conf, self.client.env)
        marker = found[0].parent / f"{name}{jobfiles.MARKER}"
        if not leave_running:
            marker.write_text(f"{time.time()}\n")  # the job script ends as checkpointed, not failed
        podman = self.settings.podman
        args = checkpoint.dump_args(
            job_id, name, dest, leave_running=leave_running, podman=podman, hooks=hooks, conf=conf, criu_dir=criu,
            outputs=outputs,
        )  # fmt: skip
        start = time.monotonic()
        try:
            proc = self.client.run(args, timeout=DUMP_TIMEOUT, check=False)
        except EngineError:
            marker.unlink(missing_ok=True)
            raise
        took = time.monotonic() - start
        if proc.returncode != 0 or not dest.is_file():
            marker.unlink(missing_ok=True)
            dest.unlink(missing_ok=True)
            raise EngineError(f"checkpoint of {name} failed: {checkpoint.dump_error(proc.stderr, proc.stdout)}")
        return checkpoint.dump_seconds(proc.stdout) or took

    def _dependency_ids(self, job: Job) -> list[str]:
        """Slurm job ids for the parents.  A parent Slurm no longer remembers counts as done
        when its exit file says 0: afterok on a forgotten id is ignored by Slurm (22.05), so a
        failed one must not be passed on."""
        listed = sorted(self._squeue(), key=lambda r: queue.job_number(r.job_id))
        known = {r.job_id for r in listed}
        rows = {r.name: r.job_id for r in listed}  # the newest submission of a name wins
        ids = []
        jobdir = self.jobdir(job.run_id)
        for parent in job.depends_on:
            jid = self._ids.get(parent) or jobfiles.read(jobdir / f"{parent}.jobid") or rows.get(parent)
            if jid and jid in known:
                ids.append(jid)
                continue
            code = jobfiles.exit_code(jobdir / f"{parent}.exit")
            if code == 0:
                continue
            if code is None:
                raise EngineError(f"{job.name} depends on {parent}, which Slurm does not know")
            raise EngineError(f"{job.name} depends on {parent}, which already failed (exit {code})")
        return ids

    # --- watch --------------------------------------------------------------------------

    def poll(self, run_id: str) -> dict[str, JobState]:
        jobdir = self.jobdir(run_id)
        rows = queue.run_rows(self._squeue(), run_id)
        names_by_id = {r.job_id: r.name for r in rows.values()}
        out: dict[str, JobState] = {}
        for name in sorted((set(rows) | jobfiles.submitted(jobdir)) - self._released):
            row = rows.get(name)
            job_id = row.job_id if row else (jobfiles.read(jobdir / f"{name}.jobid") or "")
            out[name] = replace(self._state(name, job_id, row, jobdir, names_by_id), native_id=job_id)
        return out

    def _state(self, name: str, job_id: str, row: QueueRow | None, jobdir: Path, names: Mapping[str, str]) -> JobState:
        done = jobfiles.read_exit(jobdir / f"{name}.exit", job_id)
        start = jobfiles.read_start(jobdir / f"{name}.start")
        node = (row.node if row and row.node and row.node != "(null)" else None) or start.get("node") or None
        gpus = tuple(int(g) for g in start.get("gpus", "").split(",") if g.isdigit())
        # a job that ends because one of its nodes went down shows COMPLETING (Reason=NodeDown)
        # until slurmctld says NODE_FAIL, while a gang's batch step on a surviving node may
        # already have written its code: wait for the verdict (seen on the test cluster)
        down = row is not None and row.state == "COMPLETING" and row.reason == "NodeDown"
        finished = done is not None and row is not None and row.state == "COMPLETING" and not down
        if row is not None and row.state in ACTIVE_STATES and not finished:
            reason = "" if row.reason in ("None", "(null)") else row.reason
            if row.state == "PENDING" and not reason:
                reason = "not yet scheduled"  # squeue's Reason=None before the scheduler's first pass
            if row.state == "COMPLETING" and not reason:
                reason = "its processes are ending"  # shown "completing: ...", not queued (note_wait)
            if reason == "Dependency":
                reason = f"waiting for {queue.dependency_names(row.dependency, names)}"
            started = refined(row.started(), start.get("started"))
            return JobState(name, True, None, row.state, node, gpus, reason, started=started)
        if done is not None and jobfiles.exit_verdict(jobdir / f"{name}.exit") == checkpoint.VERDICT:
            # a dump stopped the container (``checkpoint``): hetflow requeues it, never a failure
            started = refined(row.started() if row is not None else None, start.get("started"))
            ended = refined(row.ended() if row is not None else None, read_usage(jobdir / f"{name}.usage").ended)
            why = "checkpointed: its container was dumped and stopped; it goes on from there as a new attempt"
            return JobState(
                name, False, done, "CHECKPOINTED", node, gpus, why, started=started, ended=ended, checkpointed=True
            )
        if done is not None:
            status = row.state if row is not None else ("COMPLETED" if done == 0 else "FAILED")
            # a script that outlived its node's end (a gang's batch step on a surviving node folds
            # its replicas' codes after slurmctld ended the job) wrote a code; NODE_FAIL says why
            lost = status in NODE_FAULTS and done != 0
            # slurmctld forgot it (MinJobAge): accounting's record, where slurmdbd runs
            started, ended = (row.started(), row.ended()) if row is not None else self.client.sacct_times(job_id)
            started = refined(started, start.get("started"))
            ended = refined(ended, read_usage(jobdir / f"{name}.usage").ended)
            reason = queue.end_reason(status)
            if done != 0 and not reason:  # a gang says which replica failed it, as every backend does
                reason = failed_replica(jobdir, name)
            return JobState(
                name, False, done, status, node, gpus, reason, started=started, ended=ended, node_failed=lost
            )
        if row is not None and row.state == "CANCELLED" and row.reason == NEVER_SATISFIED:
            parents = queue.dependency_names(row.dependency, names)
            why = f"{NEVER_SATISFIED}: {parents} did not succeed; Slurm cancelled this job without running it"
            return JobState(name, False, None, "CANCELLED", None, (), why, dependency_failed=True)
        key = (name, job_id)
        if key not in self._final:
            self._final[key] = self._verdict(name, job_id, row)
        return self._final[key]

    def _verdict(self, name: str, job_id: str, row: QueueRow | None) -> JobState:
        """A finished job that left no exit file: ask slurmctld, then accounting."""
        state, node = (row.state, row.node) if row else ("", None)
        code: int | None = None
        if job_id:
            shown = self.client.show_job(job_id)
            if shown is not None and (code := queue.scontrol_exit(shown)) is not None:
                state = queue.scontrol_field(shown, "JobState") or state
            elif (acct := self.client.sacct(job_id)) is not None and (found := queue.sacct_row(acct)) is not None:
                state, node, code = found
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
        return JobState(
            name,
            False,
            code,
            state,
            node or None,
            (),
            queue.end_reason(state),
            node_failed=state in NODE_FAULTS,
            started=row.started() if row else None,
            ended=row.ended() if row else None,
        )

    def usage(self, name: str) -> Usage:
        """What the job's container used and when it ran, as its job script measured them on
        the node (NAME.usage: ``usage``); unknown (None) where it could not."""
        found = sorted(self.workdir.glob(f"*/{name}.usage"))
        return read_usage(found[0]) if found else Usage()

    # --- cancel / clean up --------------------------------------------------------------

    def _ids_for(self, names: Sequence[str]) -> list[str]:
        wanted = set(names)
        by_name: dict[str, str] = {}
        for r in self._squeue():
            if r.name in wanted and r.state in ACTIVE_STATES:
                by_name[r.name] = r.job_id
        return sorted(set(by_name.values()) | {self._ids[n] for n in wanted if n in self._ids and n not in by_name})

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        ids = self._ids_for(list(names))
        if not ids:
            return
        if grace:
            # the grace is hetflow's, not the cluster's KillWait: SIGTERM to every process of
            # the job (scancel(1), --signal, --full; the job script stops its container with
            # podman stop), wait for the jobs to leave the queue for up to the grace, then
            # cancel what is left.  A grace of 0 is a plain scancel: a SIGKILL would end the
            # job script before it stopped its container, which runs outside the job.
            self.client.run(["scancel", "--signal=TERM", "--full", *ids], check=False)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._any_active(ids):
                time.sleep(0.5)
        # scancel: SIGTERM to every process of the job, SIGKILL after KillWait (scancel(1))
        self.client.run(["scancel", *ids], check=False)

    def _any_active(self, ids: Sequence[str]) -> bool:
        return any(r.job_id in ids and r.state in ACTIVE_STATES for r in self._squeue())

    def release(self, names: Iterable[str]) -> None:
        """Forget finished jobs: their files go, except a non-empty NAME.out (diagnostics)."""
        for name in names:
            self._released.add(name)
            self._ids.pop(name, None)
            jobfiles.remove(self.workdir, name)
