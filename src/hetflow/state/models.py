"""Records read from the store, and the states and transitions they may take."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Run states.  A run is "running" while an executor owns it (its pid is recorded).
RUN_PENDING, RUN_RUNNING, RUN_SUCCEEDED, RUN_FAILED, RUN_STOPPED = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "stopped",
)
RUN_TERMINAL = frozenset({RUN_SUCCEEDED, RUN_FAILED, RUN_STOPPED})

# Step states.  "launching" is written before the container is started (the intent),
# so a crash between the two is found and repaired by resume.
(PENDING, WAITING, LAUNCHING, RUNNING, SUCCEEDED, FAILED, SKIPPED, STOPPED) = (
    "pending",
    "waiting",
    "launching",
    "running",
    "succeeded",
    "failed",
    "skipped",
    "stopped",
)
STEP_TERMINAL = frozenset({SUCCEEDED, FAILED, SKIPPED, STOPPED})
# A step whose job the engine holds in its queue (Slurm PENDING, a Ray task not yet placed)
# is RUNNING in the store: hetflow has handed it over, and resume adopts it like a running
# one.  People are shown it as "queued" (``StepRecord.shown_state``): the runner writes the
# engine's wait as the step's reason, starting with QUEUED_PREFIX (``EngineView.note_wait``),
# until the engine starts it.
QUEUED = "queued"
QUEUED_PREFIX = "pending: "

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({LAUNCHING, SKIPPED, STOPPED, FAILED}),
    WAITING: frozenset({LAUNCHING, SKIPPED, STOPPED, FAILED}),  # waiting = backoff before retry
    LAUNCHING: frozenset({RUNNING, LAUNCHING, WAITING, FAILED, STOPPED, SUCCEEDED}),
    RUNNING: frozenset({SUCCEEDED, WAITING, FAILED, STOPPED, RUNNING}),
    SUCCEEDED: frozenset({PENDING}),  # resume re-runs a step whose outputs were damaged
    FAILED: frozenset({PENDING}),  # resume retries failed steps
    SKIPPED: frozenset({PENDING}),
    STOPPED: frozenset({PENDING}),
}


@dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    workflow_file: str
    state: str
    created: float
    started: float | None
    ended: float | None
    pid: int | None
    uid: int
    gid: int
    workdir: str
    spec_json: str
    params_json: str
    message: str
    backend: str = "local"  # local, slurm, ray: resume, stop and logs use the same one
    backend_json: str = "{}"  # the backend settings and cluster file the run was started with
    pid_start: int | None = None  # the executor's start time (state.liveness): a reused pid is not it


@dataclass(frozen=True)
class StepRecord:
    run_id: str
    step: str
    state: str
    variant: str | None
    node: str | None
    # GPU indices (leased here; a cluster engine's), or a cluster engine's names for what it
    # gave where it gives no index (``JobState.gpus``: a device plugin's, "2x nvidia.com/gpu")
    gpus: tuple[int | str, ...]
    attempts: int
    exit_code: int | None
    started: float | None
    ended: float | None
    reason: str
    not_before: float | None

    @property
    def shown_state(self) -> str:
        """The state as ``show`` prints it: RUNNING while the engine still queues the job is "queued"."""
        return QUEUED if self.state == RUNNING and self.reason.startswith(QUEUED_PREFIX) else self.state


# The columns ``step_record`` reads, in its order: a plain tuple per row costs a third of a
# ``sqlite3.Row`` read by name (a cached rerun of 10,000 steps reads them all a few times).
STEP_COLUMNS = "run_id, step, state, variant, node, gpus, attempts, exit_code, started, ended, reason, not_before"


def step_record(r: Sequence[Any]) -> StepRecord:
    """A ``steps`` row selected as ``STEP_COLUMNS`` (a tuple: no row factory) as a record."""
    gpus = r[5]
    return StepRecord(
        r[0], r[1], r[2], r[3], r[4], () if gpus == "[]" else tuple(json.loads(gpus)), *r[6:12]
    )  # most steps: no GPU, no parse


@dataclass(frozen=True)
class AttemptRecord:
    run_id: str
    step: str
    attempt: int
    variant: str
    node: str
    gpus: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    container: str
    image: str
    state: str
    exit_code: int | None
    started: float | None
    ended: float | None
    message: str
    # What was asked for and what was used (schema 3).  None is unknown: not measured
    # (Slurm, Ray, rootless podman) or recorded by an older hetflow.
    cpus: float | None = None  # requested
    memory: int | None = None  # requested, bytes
    peak_memory: int | None = None  # bytes, the attempt's cgroup peak
    cpu_seconds: float | None = None  # user + system
    image_id: str | None = None  # digest (or ID) of the image that ran
    run_started: float | None = None  # the container's own start and exit, as the engine saw them
    run_ended: float | None = None
    # Which version of the run's workflow the attempt ran: 1 as submitted, 2 after the first
    # resume that applied an edited file (workflow.v1.yaml keeps version 1), ...  None:
    # recorded by a hetflow that did not track versions.
    workflow_version: int | None = None
    # What its GPUs did, sampled from NVML on this machine (``execute.devices.usage``): percent,
    # bytes, and whose memory that is ("process": the attempt's own; "device": everything on
    # its GPUs).  None: not sampled (no NVML, a fake GPU, a cluster engine, too short a step).
    gpu_util_mean: float | None = None
    gpu_util_max: float | None = None
    gpu_memory_peak: int | None = None
    gpu_memory_of: str | None = None
    # lost with its node (Slurm NODE_FAIL, a removed Ray node) and run again outside the step's
    # retries (attempts.node_fault): its state is "failed", people are shown it as "lost"
    lost: bool = False
    # the engine's own id of its job (Slurm job id, Ray task id, Kubernetes Job name), as the
    # engine's poll gave it (``JobState.native_id``); None: this machine's podman, or not said yet
    native_id: str | None = None

    @property
    def shown_state(self) -> str:
        """The state as ``trace`` and ``show`` print it: a failed attempt lost with its node is "lost"."""
        return "lost" if self.lost and self.state == FAILED else self.state


# The measured columns of an attempt, which Store.set_usage writes.
USAGE_FIELDS = (
    "peak_memory",
    "cpu_seconds",
    "image_id",
    "run_started",
    "run_ended",
    "gpu_util_mean",
    "gpu_util_max",
    "gpu_memory_peak",
    "gpu_memory_of",
)


@dataclass(frozen=True)
class UsageRow:
    """One succeeded attempt's request and use, for right-sizing (``Store.usage_history``)."""

    workflow: str
    step: str
    variant: str
    cpus: float | None  # requested
    memory: int | None  # requested, bytes
    peak_memory: int | None  # used, bytes
    cpu_seconds: float | None  # used
    seconds: float | None  # how long it ran


@dataclass(frozen=True)
class ParamRecord:
    """One effective param of a run and where its value came from (``Store.run_params``):
    "workflow FILE:LINE" (its default), "config FILE:LINE", "profile 'NAME' FILE:LINE",
    "params-file FILE:LINE", "-p", or "-" where the run was recorded without sources."""

    name: str
    value: object
    source: str


@dataclass(frozen=True)
class OutputRecord:
    run_id: str
    step: str
    name: str
    sha256: str
    size: int
    path: str


@dataclass(frozen=True)
class Event:
    id: int
    run_id: str
    step: str | None
    time: float
    kind: str
    message: str
    data: str = "{}"  # JSON: what a typed event carries beyond its kind (state.events)


@dataclass(frozen=True)
class Lease:
    """One attempt's hold on (part of) one GPU; several rows may share a GPU (time-slicing
    or MPS tenants, MIG instances), never with a ``whole`` row."""

    gpu_uuid: str  # the physical GPU
    run_id: str
    step: str
    attempt: int
    container: str
    pid: int
    mode: str = "whole"  # whole | time-slicing | mps | mig
    share: float = 0.0  # time-slicing / mps: the fraction held
    mig: str = ""  # mig: the MIG-... uuid of the instance held


@dataclass
class RunView:
    """A run with its steps, for reports."""

    run: RunRecord
    steps: list[StepRecord] = field(default_factory=list)


@dataclass(frozen=True)
class CacheEntry:
    """A step result kept across runs (see ``execute.data.cache``)."""

    key: str
    workflow: str
    step: str
    run_id: str  # the run that produced it
    created: float
    used: float
    size: int
    key_json: str
    outputs_json: str


@dataclass(frozen=True)
class CachedResult:
    """A step whose result was taken from the cache, to be recorded (``Store.cache_steps``):
    its outputs, the step succeeded with ``reason`` at ``time``, and entry ``key`` used."""

    step: str
    variant: str
    outputs: tuple[OutputRecord, ...]
    reason: str
    key: str
    time: float
    inputs: tuple[tuple[str, str], ...] = ()  # the data digests it was taken for (``result_inputs``)


@dataclass(frozen=True)
class PublishRecord:
    """What hetflow published at one target (``execute.data.publishing.publish``): the file a later run of
    the same workflow may replace, as long as its content is still ``sha256``."""

    target: str  # a host path (its folder resolved) or s3://bucket/key
    sha256: str
    size: int
    run_id: str
    step: str
    workflow: str
    time: float
    etag: str = ""  # S3: the object's ETag when it was written ("" for host files)


@dataclass(frozen=True)
class SlowdownSample:
    """One measured run of a GPU shared by ``load`` tenants against the same run alone
    (``tools/gpu-check``'s sharing part, read in by ``hetflow profile slowdown FILE``): the
    points ``plan.learn_slowdown`` fits the time-slicing model to."""

    gpu_model: str  # as NVML names it ("NVIDIA H100 80GB HBM3"), the cluster file's gpus.model
    mode: str  # "time-slicing" or "mps"
    solo: float  # seconds
    shared: float  # seconds
    load: float  # tenants on the GPU
    source: str  # where it was read from (a file)
    time: float  # when it was recorded
