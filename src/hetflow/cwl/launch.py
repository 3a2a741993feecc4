"""One CWL job's container through hetflow's backend: submit, wait, read its log, release."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.cwl.containers.batch import BatchJob, JobResult, batch_spec, read_result, write_folder
from hetflow.cwl.placement import ClusterPlace
from hetflow.cwl.requests import MIN_MEMORY, JobRequest
from hetflow.cwl.session import Session
from hetflow.execute import ContainerSpec, Job, cri_lines, read_lines

TIMED_OUT_CODE = 124  # as timeout(1) says it


@dataclass(frozen=True)
class Result:
    exit_code: int
    log_lines: list[str] = field(default_factory=list)  # what the tool wrote that was not redirected
    timed_out: bool = False
    node: str | None = None  # where the backend ran it, when it says
    gpus: tuple[int | str, ...] = ()  # the GPUs the backend gave it, when it says


def run_container(
    session: Session,
    step: str,
    spec: ContainerSpec,
    request: JobRequest,
    *,
    timelimit: int | None = None,
    attempt: int = 1,
    place: ClusterPlace | None = None,
) -> Result:
    """``place``: where a cluster's plan puts it (its scheduler is asked for that node or class)."""
    job = Job(
        name=spec.name,
        run_id=session.run_id,
        step=step,
        attempt=attempt,
        container=spec,
        cpus=spec.cpus or request.cpus,
        memory=request.memory,
        gpus=request.gpus,
        node=place.node if place else None,
        node_class=place.node_class if place else None,
        gpu_model=place.gpu_model if place else None,
    )
    if spec.log_path:
        Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
    waiter = session.waiter()  # watching the run before the job is in it (``waiting``)
    session.backend.submit(job)
    state = waiter.wait(spec.name, timeout=timelimit if timelimit else None)
    timed_out = state is None
    if timed_out:
        session.backend.cancel([spec.name], grace=0)
        state = waiter.wait(spec.name)
    code = TIMED_OUT_CODE if timed_out or state is None else state.exit_code
    lines, _ = read_lines(Path(spec.log_path)) if spec.log_path else ([], 0)
    session.backend.release([spec.name])
    return Result(
        exit_code=255 if code is None else code,
        log_lines=[text for _, text in lines],
        timed_out=timed_out,
        node=None if state is None else state.node,
        gpus=() if state is None else state.gpus,
    )


def run_batch(session: Session, jobs: list[BatchJob]) -> dict[str, JobResult]:
    """``jobs`` in one container (``batch``): each recorded as started in it, each job's own
    exit code and output back; each job's output also in its own log, as a container's."""
    number = session.next_batch()
    step = f"batch{number}"
    name = f"hf-{session.run_id}-{step}-1"
    folder = session.workdir / "batches" / step
    write_folder(folder, jobs)
    spec = batch_spec(name, step, jobs, folder, str(session.workdir / "logs" / f"{step}.1.log"))
    request = JobRequest(cpus=spec.cpus or 1.0, memory=spec.memory or MIN_MEMORY)
    if session.recorder is not None:
        for job in jobs:
            cpus, memory = job.spec.cpus or 1.0, job.spec.memory or 0
            session.recorder.started(job.key, job.cwl_name, container=name, image=job.image, cpus=cpus, memory=memory)
    result = run_container(session, step, spec, request)
    out = {job.key: read_result(folder, job.key, result.exit_code) for job in jobs}
    for job in jobs:
        _write_log(job.spec.log_path, out[job.key].log_lines)
    return out


def _write_log(path: str | None, lines: list[str]) -> None:
    """A batched job's output as podman's k8s-file log of its own container would hold it
    (``hetflow logs RUN STEP``)."""
    if not path:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000+00:00", time.gmtime())
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(cri_lines("".join(f"{stamp} {line}\n" for line in lines), "stdout"))
