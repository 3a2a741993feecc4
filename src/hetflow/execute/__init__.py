"""Running steps: from a recorded run to containers or cluster jobs, and back into the store.

    session     submit_run / open_run / resume_run / drive: what ``hetflow run``, ``resume``
                and the detached executor do (the CLI only parses and prints)
    prepare     pin images and plan, once per run; runplan: the RunPlan stored with the run
    runner      the loop: dispatch ready steps, poll, finalize, retry, persist
    dispatch    where a step runs: LocalDispatch (capacity, GPU leases, variant chooser)
                or ClusterDispatch (the cluster plan's placements)
    attempts    attempts in flight: accept outputs, retry with backoff, fail
    lifecycle   stop_run, reset_for_resume, adopting what a dead executor left, pid_alive
    stopping    a stop's grace period (--grace, HETFLOW_STOP_GRACE) and `hetflow stop`'s request
    doctor      leftovers of crashed runs (containers, networks, leases, stale runs) and repair
    engine      the container engine seam (podman, docker; fakeengine: the fake); container, gpu, paths,
                logs, outputs: what one container gets and leaves behind
    images      pin each step's image to the build for this node
    data        workflow data resolved at submit (host files hashed, S3 listed and fetched)
    fanout      fan-outs expanded at submit or run time; publish: results copied out
    cache       the cross-run cache: keys on content, entries and their objects
    settings    the backend settings a run is started with
    mpilaunch   an mpirun gang's SSH keys, sshd/ssh configs, hostfiles and replica
                commands (pure: no engine calls; import hetflow.execute.mpilaunch)
    backends/   the engines a run can use (local, Slurm, Ray)

Names are loaded on first use, so ``import hetflow.execute`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.attempts import RunnerConfig
    from hetflow.execute.backends.factory import make_backend
    from hetflow.execute.cache import Key, ResultCache, cache_key, input_digests
    from hetflow.execute.container import build_spec, container_env, input_mounts
    from hetflow.execute.data import DataManifest, resolve_data
    from hetflow.execute.dispatch import ClusterDispatch, Decision, Dispatch, LocalDispatch
    from hetflow.execute.doctor import Finding, diagnose, repair
    from hetflow.execute.engine import (
        LABEL_ATTEMPT,
        LABEL_RUN,
        LABEL_STEP,
        CliEngine,
        ContainerEngine,
        ContainerSpec,
        ContainerState,
        DockerEngine,
        Mount,
        Usage,
        cri_lines,
        make_engine,
        run_args,
    )
    from hetflow.execute.fakeengine import FakeEngine
    from hetflow.execute.fanout import expand_for_planning
    from hetflow.execute.gpu import DRIVER_DIR, GpuAccess, cdi_device_names, driver_mounts, gpu_access
    from hetflow.execute.images import PinResult, default_resolver, pin_images
    from hetflow.execute.lifecycle import pid_alive, reset_for_resume, stop_run
    from hetflow.execute.logs import Records, group_records, log_tail, parse_line, read_lines
    from hetflow.execute.outputs import accept_outputs, damaged_outputs, missing_outputs, sha256_of
    from hetflow.execute.paths import RunPaths, container_name
    from hetflow.execute.prepare import cluster_instance
    from hetflow.execute.runner import NullReporter, Reporter, Runner
    from hetflow.execute.runplan import RunPlan, apply_images, stored_plan
    from hetflow.execute.session import (
        Ended,
        OpenRun,
        build_runner,
        drive,
        edited_since,
        load_recorded,
        open_run,
        resume_run,
        submit_run,
    )
    from hetflow.execute.settings import Settings, load_settings
    from hetflow.execute.stopping import DEFAULT_GRACE, grace_from_env, parse_grace
    from hetflow.execute.submit import create_run, new_run_id, preflight

_WHERE = {
    "backends.factory": ["make_backend"],
    "attempts": ["RunnerConfig"],
    "cache": ["Key", "ResultCache", "cache_key", "input_digests"],
    "data": ["DataManifest", "resolve_data"],
    "fakeengine": ["FakeEngine"],
    "fanout": ["expand_for_planning"],
    "prepare": ["cluster_instance"],
    "container": ["build_spec", "container_env", "input_mounts"],
    "dispatch": ["ClusterDispatch", "Decision", "Dispatch", "LocalDispatch"],
    "engine": [
        "LABEL_ATTEMPT",
        "LABEL_RUN",
        "LABEL_STEP",
        "CliEngine",
        "ContainerEngine",
        "ContainerSpec",
        "ContainerState",
        "DockerEngine",
        "Mount",
        "Usage",
        "cri_lines",
        "make_engine",
        "run_args",
    ],
    "gpu": ["DRIVER_DIR", "GpuAccess", "cdi_device_names", "driver_mounts", "gpu_access"],
    "images": ["PinResult", "default_resolver", "pin_images"],
    "doctor": ["Finding", "diagnose", "repair"],
    "lifecycle": ["pid_alive", "reset_for_resume", "stop_run"],
    "logs": ["Records", "group_records", "log_tail", "parse_line", "read_lines"],
    "outputs": ["accept_outputs", "damaged_outputs", "missing_outputs", "sha256_of"],
    "paths": ["RunPaths", "container_name"],
    "runner": ["NullReporter", "Reporter", "Runner"],
    "runplan": ["RunPlan", "apply_images", "stored_plan"],
    "session": [
        "Ended",
        "OpenRun",
        "build_runner",
        "drive",
        "edited_since",
        "load_recorded",
        "open_run",
        "resume_run",
        "submit_run",
    ],
    "settings": ["Settings", "load_settings"],
    "stopping": ["DEFAULT_GRACE", "grace_from_env", "parse_grace"],
    "submit": ["create_run", "new_run_id", "preflight"],
}
__all__ = [
    "DEFAULT_GRACE",
    "DRIVER_DIR",
    "LABEL_ATTEMPT",
    "LABEL_RUN",
    "LABEL_STEP",
    "CliEngine",
    "ClusterDispatch",
    "ContainerEngine",
    "ContainerSpec",
    "ContainerState",
    "DataManifest",
    "Decision",
    "Dispatch",
    "DockerEngine",
    "Ended",
    "FakeEngine",
    "Finding",
    "GpuAccess",
    "Key",
    "LocalDispatch",
    "Mount",
    "NullReporter",
    "OpenRun",
    "PinResult",
    "Records",
    "Reporter",
    "ResultCache",
    "RunPaths",
    "RunPlan",
    "Runner",
    "RunnerConfig",
    "Settings",
    "Usage",
    "accept_outputs",
    "apply_images",
    "build_runner",
    "build_spec",
    "cache_key",
    "cdi_device_names",
    "cluster_instance",
    "container_env",
    "container_name",
    "create_run",
    "cri_lines",
    "damaged_outputs",
    "default_resolver",
    "diagnose",
    "drive",
    "driver_mounts",
    "edited_since",
    "expand_for_planning",
    "gpu_access",
    "grace_from_env",
    "group_records",
    "input_digests",
    "input_mounts",
    "load_recorded",
    "load_settings",
    "log_tail",
    "make_backend",
    "make_engine",
    "missing_outputs",
    "new_run_id",
    "open_run",
    "parse_grace",
    "parse_line",
    "pid_alive",
    "pin_images",
    "preflight",
    "read_lines",
    "repair",
    "reset_for_resume",
    "resolve_data",
    "resume_run",
    "run_args",
    "sha256_of",
    "stop_run",
    "stored_plan",
    "submit_run",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
