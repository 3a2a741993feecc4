"""CWL jobs in batches: several small jobs of one invocation run one after another in one
container (``hetflow-cwl-runner --hetflow-batch N``), as hetflow's own fan-outs do
(``execute`` batching) and as Nextflow's ``array`` and Snakemake's job groups pack tasks.

A container's start and removal cost podman about 0.2-0.4 s; a scatter job that echoes a line
costs milliseconds.  cwltool still makes every job (its command line, staging, environment)
and collects every job's outputs; only the container is shared.  Jobs are batched together
when they would have had the same container but for their own mounts, command and
environment: the same image, user, CPUs, memory, /tmp size and network, no GPUs and no time
limit.  Each job gets an output directory of its own in the container
(``tool.HetflowCommandLineTool`` gives each job its own ``runtime.outdir``), so the jobs'
mounts never collide and their union is the batch container's.

The batch's folder (mounted at ``MOUNT``) holds ``order`` (one job key a line), ``jobs/KEY.sh``
(the job's environment, working directory, redirections and command, quoted for ``sh``) and
the entry ``run``.  For each job in turn the entry empties ``/tmp`` (the container's tmpfs:
each job starts with it empty, as in a container of its own), runs the job with its output
not redirected by the tool in ``log/KEY`` and writes its exit code to ``rc/KEY`` (renamed
into place: an ``rc`` file is whole).  A job with no ``rc`` when the container ended did not
run to its end (the batch was stopped or killed): it fails with the container's exit code.

A batch is sent when it is full, or when no job has joined it for ``LINGER`` seconds (cwltool
hands over the ready jobs of a scatter within milliseconds of each other)."""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from hetflow.cwl.containers.container import Redirects, redirections
from hetflow.execute import ContainerSpec, Mount
from hetflow.kube import LABEL_STEP

MOUNT = "/.hetflow/cwlbatch"  # where the batch's folder is in its container
LINGER = 0.3  # seconds a batch waits for one more job before it is sent
ENTRY = """\
#!/bin/sh
# hetflow's CWL batch entry: each job in turn, /tmp emptied before it, its exit code kept.
b=/.hetflow/cwlbatch
while IFS= read -r k; do
  [ -e "$b/rc/$k" ] && continue
  rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* 2>/dev/null
  sh "$b/jobs/$k.sh" < /dev/null > "$b/log/$k" 2>&1
  echo "$?" > "$b/rc/.$k"
  mv "$b/rc/.$k" "$b/rc/$k"
done < "$b/order"
"""


@dataclass(frozen=True)
class BatchJob:
    """One CWL job as a batch runs it: its container as it would have been run alone."""

    key: str  # unique in the invocation: the job's hetflow step name
    cwl_name: str  # cwltool's name of the job (step, scatter index)
    image: str  # as the tool names it (the spec's may be its pinned ID)
    spec: ContainerSpec
    io: Redirects  # its output directory in the container and the tool's redirections
    command: tuple[str, ...]  # the image's ENTRYPOINT, then the tool's command line
    env: Mapping[str, str]


@dataclass(frozen=True)
class JobResult:
    exit_code: int
    log_lines: list[str] = field(default_factory=list)


def group_key(spec: ContainerSpec) -> tuple[object, ...]:
    """What jobs of one batch share: everything of the container but mounts, command, env."""
    return (spec.image, spec.user, spec.cpus, spec.memory, spec.tmpfs_size, spec.network, spec.cap_add)


def job_script(job: BatchJob) -> str:
    """``jobs/KEY.sh``: the job's environment exported, its directory, its command with the
    tool's redirections (what the tool does not redirect goes to the batch's ``log/KEY``)."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(job.env.items())]
    lines.append(f"cd {shlex.quote(job.io.workdir)} || exit 1")
    lines.append("exec " + " ".join(shlex.quote(a) for a in job.command) + redirections(job.io))
    return "\n".join(lines) + "\n"


def batch_spec(name: str, step: str, jobs: Sequence[BatchJob], folder: Path, log_path: str) -> ContainerSpec:
    """The batch's container: the first job's, with every job's mounts and the batch folder,
    running the entry; its environment the jobs' own, set by each job's script."""
    first = jobs[0].spec
    mounts: dict[str, Mount] = {}
    for job in jobs:
        for m in job.spec.mounts:
            mounts[m.target] = m
    mounts[MOUNT] = Mount(str(folder), MOUNT, read_only=False)
    labels = {**first.labels, LABEL_STEP: step}
    return replace(
        first,
        name=name,
        entrypoint=("/bin/sh",),
        command=(f"{MOUNT}/run",),
        env={},
        mounts=tuple(mounts.values()),
        labels=labels,
        log_path=log_path,
    )


def write_folder(folder: Path, jobs: Sequence[BatchJob]) -> None:
    for sub in ("jobs", "log", "rc"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for job in jobs:
        (folder / "jobs" / f"{job.key}.sh").write_text(job_script(job))
    (folder / "order").write_text("".join(f"{j.key}\n" for j in jobs))
    (folder / "run").write_text(ENTRY)


def read_result(folder: Path, key: str, container_code: int) -> JobResult:
    """The job's exit code and what it wrote unredirected; the container's code when the
    batch ended before the job did."""
    try:
        code = int((folder / "rc" / key).read_text().strip())
    except (OSError, ValueError):
        code = container_code if container_code != 0 else 255
    try:
        lines = (folder / "log" / key).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    return JobResult(code, lines)


RunBatch = Callable[[list[BatchJob]], dict[str, JobResult]]


@dataclass
class _Open:
    jobs: list[BatchJob]
    targets: dict[str, str]  # mount target -> source: a job whose mounts collide waits for the next batch
    full: threading.Event = field(default_factory=threading.Event)
    results: dict[str, JobResult] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    joined: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Gathers jobs that can share a container, sends each batch to ``run`` (on the thread of
    the job that opened it) and hands each job its own result."""

    def __init__(self, size: int, run: RunBatch, linger: float = LINGER) -> None:
        self.size, self.run_batch, self.linger = size, run, linger
        self._lock = threading.Lock()
        self._open: dict[tuple[object, ...], _Open] = {}

    def run(self, job: BatchJob) -> JobResult:
        key = group_key(job.spec)
        with self._lock:
            batch = self._open.get(key)
            if batch is not None and (len(batch.jobs) >= self.size or _collides(batch, job)):
                batch.full.set()
                del self._open[key]
                batch = None
            opener = batch is None
            if batch is None:
                batch = self._open[key] = _Open([], {})
            batch.jobs.append(job)
            batch.targets.update((m.target, m.source) for m in job.spec.mounts)
            batch.joined.set()
            if len(batch.jobs) >= self.size:
                batch.full.set()
                self._open.pop(key, None)
        if opener:
            self._send(key, batch)
        batch.done.wait()
        return batch.results[job.key]

    def _send(self, key: tuple[object, ...], batch: _Open) -> None:
        while not batch.full.is_set():
            batch.joined.clear()
            if not batch.joined.wait(self.linger):
                break  # no job joined for a while: send what is there
        with self._lock:
            if self._open.get(key) is batch:
                del self._open[key]
            jobs = list(batch.jobs)
        try:
            batch.results = self.run_batch(jobs)
        except Exception as exc:  # every job of the batch fails with the reason, none waits for ever
            batch.results = {j.key: JobResult(255, [f"hetflow could not run the batch: {exc}"]) for j in jobs}
        finally:
            missing = {j.key: JobResult(255, ["hetflow: the batch gave no result"]) for j in jobs}
            batch.results = {**missing, **batch.results}
            batch.done.set()


def _collides(batch: _Open, job: BatchJob) -> bool:
    return any(batch.targets.get(m.target, m.source) != m.source for m in job.spec.mounts)
