"""One task's attempt, from INITIALIZING to its end: it becomes a hetflow run (steps
``exec-0``, ``exec-1``, ... in the store, so ``hetflow ps``, ``show`` and ``logs`` see it),
its inputs are staged, its executors run one after another in hardened containers on the
backend (``Job``/``ContainerSpec``, the same seam hetflow's runner uses), and its outputs are
copied out.  Every change is written to the store as it happens, so a GET shows it."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from hetflow.config import submitter
from hetflow.errors import EngineError, HetflowError
from hetflow.execute import (
    Backend,
    ContainerSpec,
    GpuAccess,
    Job,
    JobState,
    ObjectStore,
    RunPaths,
    container_name,
    gpu_access,
    group_records,
    new_run_id,
    s3_filesystem,
)
from hetflow.inventory import Gpu, Node
from hetflow.kube import LABEL_ATTEMPT, LABEL_RUN, LABEL_STEP
from hetflow.state import AttemptRecord, Store, TesTaskRow, pid_alive, process_start
from hetflow.tes.messages import ExecutorLog, State, Task, TaskLog
from hetflow.tes.service import staging
from hetflow.tes.service.config import S3
from hetflow.tes.service.gpus import parse_ask

TAIL_BYTES = 10_000  # of stdout and stderr kept in an executor's log (TES: "a tail")
POLL_S = 0.5  # how often a running executor is looked at when the engine cannot call back
NOT_RUN_CODE = 127  # an executor the engine could not start (as `docker run` exits: command not found)


def stamp(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).isoformat(timespec="milliseconds")


class Canceled(Exception):
    """The task was canceled while it ran."""


def requeued(attempt: int) -> str:
    """The system log line of a task the server stopped during (killed, or stopped with it)."""
    return f"the server stopped during attempt {attempt}; queued to run again"


class ServerStopping(Exception):
    """The server is stopping: the attempt's container is ended, the task queued again."""


class TaskWork:
    """Run ``row`` (claimed INITIALIZING by the caller) to its end on ``backend``."""

    def __init__(
        self,
        store: Store,
        home: Path,
        row: TesTaskRow,
        backend: Backend,
        wake: threading.Event,
        s3: S3 | None = None,
        *,
        network: bool = False,
    ) -> None:
        self.store, self.home, self.row, self.backend, self.wake, self.s3 = store, home, row, backend, wake, s3
        self.network = network  # the executors' containers get podman's bridge network (tes.yaml task_network)
        self.task = Task.model_validate_json(row.task_json)
        self.logs = [TaskLog.model_validate(x) for x in json.loads(row.logs_json)]
        self.log = TaskLog(start_time=stamp(), system_logs=[f"attempt {row.attempt}"])
        self.logs.append(self.log)
        self.run_id = row.run_id or new_run_id()
        self.workdir = home / "runs" / self.run_id
        self.current: str | None = None
        self.gpus: tuple[Gpu, ...] = ()  # leased for the whole task by the scheduler (``gpus.lease``)
        self.node: Node | None = None  # this machine, whose GPUs those are
        self.stopping: Callable[[], bool] = lambda: False  # the server is stopping (``TesService.stop``)

    def run(self) -> None:
        end, why = State.COMPLETE, ""
        try:
            self._record_run()
            lay = staging.layout(self.task, self.workdir / "fs")
            staging.prepare(lay)
            fs = self._object_store()
            self._say(*staging.stage_inputs(self.task, lay, fs))
            if not self.store.claim_tes_task(self.row.id, State.INITIALIZING, State.RUNNING):
                raise Canceled
            for i, ex in enumerate(self.task.executors):
                if self.stopping():
                    raise ServerStopping
                code = self._execute(i, lay)
                if code != 0 and not ex.ignore_error:
                    end, why = State.EXECUTOR_ERROR, f"executor {i} exited {code}"
                    break
            if end is State.COMPLETE:
                self.log.outputs = staging.collect(self.task, lay, fs)
        except Canceled:
            end, why = State.CANCELED, "canceled"
        except ServerStopping:
            self._requeue()
            return
        except staging.StagingError as exc:
            end, why = State.SYSTEM_ERROR, str(exc)
        except (HetflowError, OSError) as exc:
            end, why = State.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
        self._finish(end, why)

    def _object_store(self) -> ObjectStore | None:
        """The S3 file system, when the server has one and the task names an s3:// URL."""
        urls = [i.url or "" for i in self.task.inputs or []] + [o.url for o in self.task.outputs or []]
        if self.s3 is None or not any(u.startswith("s3://") for u in urls):
            return None
        return s3_filesystem(self.s3.endpoint)

    # --- the run in hetflow's store -------------------------------------------------------

    def _record_run(self) -> None:
        if self.gpus:
            self._say("GPUs " + ", ".join(f"{g.index} ({g.model}, {g.uuid})" for g in self.gpus))
        uid, gid = submitter()
        self.workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        steps = {f"exec-{i}": {"image": ex.image, "command": ex.command} for i, ex in enumerate(self.task.executors)}
        spec = {"apiVersion": "hetflow/v1", "name": self._name(), "steps": steps}
        self.store.create_run(
            run_id=self.run_id,
            name=self._name(),
            workflow_file=f"tes:{self.row.id}",
            spec_json=json.dumps(spec),
            params_json="{}",
            uid=uid,
            gid=gid,
            workdir=str(self.workdir),
            steps=list(steps),
        )
        pid = os.getpid()
        self.store.claim_run(self.run_id, pid, pid_alive, process_start(pid))
        self.store.set_tes_task(self.row.id, run_id=self.run_id)
        self._say(f"hetflow run {self.run_id}")

    def _name(self) -> str:
        return f"tes-{self.row.id}"

    def _say(self, *lines: str) -> None:
        self.log.system_logs = [*(self.log.system_logs or []), *lines]
        self._save()

    def _save(self) -> None:
        self.store.set_tes_task(
            self.row.id, logs_json=json.dumps([x.model_dump(mode="json", exclude_none=True) for x in self.logs])
        )

    def _canceled(self) -> bool:
        row = self.store.tes_task(self.row.id)
        return row is None or row.state == State.CANCELING

    # --- one executor ----------------------------------------------------------------------

    def _job(self, i: int, lay: staging.Layout, paths: RunPaths) -> Job:
        """Executor ``i`` as the backend runs it: a hardened container with the task's volumes
        and, of this machine's GPUs, only the task's own (``gpu_access``, as hetflow's launch)."""
        ex = self.task.executors[i]
        step = f"exec-{i}"
        name = container_name(self.run_id, step, 1)
        res = self.task.resources
        cpus = float(res.cpu_cores) if res and res.cpu_cores else None
        memory = int(res.ram_gb * 2**30) if res and res.ram_gb else None
        uid, gid = submitter()
        # only its own GPUs' nodes, and NVIDIA_VISIBLE_DEVICES as hetflow's launch sets it (void: none)
        none = GpuAccess(env={"NVIDIA_VISIBLE_DEVICES": "void"})
        access = gpu_access(self.gpus, self.node) if self.gpus and self.node is not None else none
        spec = ContainerSpec(
            name=name,
            image=ex.image,
            command=tuple(ex.command),
            user=f"{uid}:{gid}",
            labels={LABEL_RUN: self.run_id, LABEL_STEP: step, LABEL_ATTEMPT: "1"},
            env={"HOME": "/tmp", **(ex.env or {}), **access.env},
            mounts=(*lay.mounts, *access.mounts),
            devices=access.devices,
            cdi_devices=access.cdi_devices,
            group_add=access.groups,
            cpus=cpus,
            memory=memory,
            network=self.network,
            log_path=str(paths.log(step, 1)),
            workdir=ex.workdir or "",
        )
        c, m = cpus or 1.0, memory or 0
        job = Job(name=name, run_id=self.run_id, step=step, attempt=1, container=spec, cpus=c, memory=m)
        if self.gpus:
            return replace(job, gpus=len(self.gpus))
        ask = parse_ask(dict(res.backend_parameters or {})) if res is not None and self.node is None else None
        if ask is not None:  # a cluster backend: its engine assigns them (Slurm gres of the model's type)
            return replace(job, gpus=ask.count, gpu_model=ask.model or None)
        return job

    def _execute(self, i: int, lay: staging.Layout) -> int:
        ex = self.task.executors[i]
        step = f"exec-{i}"
        name = container_name(self.run_id, step, 1)
        paths = RunPaths(self.workdir)
        paths.log(step, 1).parent.mkdir(parents=True, exist_ok=True)
        job = self._job(i, lay, paths)
        if not self.backend.image_exists(ex.image):
            raise staging.StagingError(
                f"executors[{i}].image {ex.image!r} is not on this machine (no registry is reachable)"
            )
        started = time.time()
        self.store.set_step(self.run_id, step, state="launching", attempts=1, started=started, event="TES executor")
        self.store.add_attempt(
            AttemptRecord(
                self.run_id,
                step,
                1,
                "default",
                "local",
                tuple(g.index for g in self.gpus),
                tuple(g.uuid for g in self.gpus),
                name,
                ex.image,
                "running",
                None,
                started,
                None,
                "",
            )
        )
        self.current = name
        try:
            self.backend.submit(job)
            self.store.set_step(self.run_id, step, state="running")
            code, reason = self._wait(name, step)
        except EngineError as exc:
            code, reason = NOT_RUN_CODE, str(exc)
        finally:
            self.current = None
        ended = time.time()
        out, err = self._streams(paths.log(step, 1))
        if reason:
            err = (err + "\n" + reason).lstrip("\n")
        self._write_streams(ex.stdout, ex.stderr, out, err, lay)
        state = "succeeded" if code == 0 else "failed"
        self.store.set_attempt(self.run_id, step, 1, state=state, exit_code=code, ended=ended, message=reason)
        self.store.set_step(
            self.run_id, step, state=state, exit_code=code, ended=ended, reason=reason, event=f"exit {code}"
        )
        self.log.logs.append(
            ExecutorLog(
                start_time=stamp(started),
                end_time=stamp(ended),
                exit_code=code,
                stdout=out[-TAIL_BYTES:],
                stderr=err[-TAIL_BYTES:],
            )
        )
        self._save()
        self.backend.release([name])
        return code

    def _wait(self, name: str, step: str) -> tuple[int, str]:
        while True:
            state: JobState | None = self.backend.poll(self.run_id).get(name)
            if state is not None and not state.running:
                if state.node:  # a cluster's: the node its engine chose (the attempt says it: show, the dashboard)
                    self._say(f"{step} ran on node {state.node} ({state.status})")
                    self.store.set_attempt(self.run_id, step, 1, node=state.node)
                    self.store.set_step(self.run_id, step, node=state.node)
                return (state.exit_code if state.exit_code is not None else NOT_RUN_CODE), state.reason
            if self._canceled():
                self.backend.cancel([name], grace=0)
                self.backend.release([name])
                raise Canceled
            if self.stopping():
                self.backend.cancel([name], grace=0)
                self.backend.release([name])
                raise ServerStopping
            self.wake.wait(POLL_S)
            self.wake.clear()

    def _streams(self, log: Path) -> tuple[str, str]:
        if not log.exists():
            return "", ""
        records = group_records(log.read_bytes())
        out = "".join(text + "\n" for stream, text in records.lines if stream == "stdout")
        err = "".join(text + "\n" for stream, text in records.lines if stream == "stderr")
        # a last line without a newline stays a partial record (CRI "P"): it is output all the same
        if records.pending_stream == "stdout":
            out += records.pending
        elif records.pending_stream == "stderr":
            err += records.pending
        return out, err

    def _write_streams(self, stdout: str | None, stderr: str | None, out: str, err: str, lay: staging.Layout) -> None:
        for path, text in ((stdout, out), (stderr, err)):
            if path:
                lay.host(path).parent.mkdir(parents=True, exist_ok=True)
                lay.host(path).write_text(text, encoding="utf-8")

    # --- the end ---------------------------------------------------------------------------

    def _requeue(self) -> None:
        """The server stopped during this attempt: its container is gone (``_wait``), the
        task runs again as a new attempt at the next start, as after a kill (``recover``)."""
        self.log.end_time = stamp()
        why = requeued(self.row.attempt)
        self.log.system_logs = [*(self.log.system_logs or []), why]
        self._save()
        moves = ((State.RUNNING, State.QUEUED), (State.INITIALIZING, State.QUEUED), (State.CANCELING, State.CANCELED))
        for was, now in moves:
            if self.store.claim_tes_task(self.row.id, was, now):
                break
        with contextlib.suppress(HetflowError):
            self.store.set_run(self.run_id, state="failed", ended=time.time(), message=why)

    def _finish(self, end: State, why: str) -> None:
        self.log.end_time = stamp()
        if why:
            self._say(why)
        self._save()
        self.store.set_tes_task(self.row.id, state=end.value)
        run_state = {State.COMPLETE: "succeeded", State.CANCELED: "stopped"}.get(end, "failed")
        with contextlib.suppress(HetflowError):
            self.store.set_run(self.run_id, state=run_state, ended=time.time(), message=why)


Starter = Callable[[TesTaskRow], None]
