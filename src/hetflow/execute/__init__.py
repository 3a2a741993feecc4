"""Running steps: from a recorded run to containers or cluster jobs, and back into the store.

The package has rooms, one per stage of a run's life; a module at the top is shared by them.

    submit/     a run comes in: session (submit_run / open_run / resume_run, what ``hetflow
                run``, ``resume`` and the detached executor do), prepare (pin images and plan,
                once per run), pin (each step's image build for its node), record (the run
                written to the store), runplan (the RunPlan stored with it), preview (the dry
                run), checkrun (validate's run-time checks), amend and rehash (what ``resume``
                finds changed), reset (a run made ready to resume)
    run/        a run goes: runner (the loop: dispatch ready steps, poll, finalize, retry,
                persist), options (what a Runner is given), dispatch (LocalDispatch or
                ClusterDispatch), attempts, retries, cachepass, decisions, lostattempts,
                executor (drive, build_runner), growth, notify; launch/ (one attempt's
                container and its GPUs); control/ (stopping, lifecycle: stop_run and adopting
                what a dead executor left, moves: drain and migrate)
    backends/   the engines a run can use, made by backends.make_backend: local/ (podman,
                docker, the fake engine, cgroups, exits, orphans, the OCI runtime, CRIU under
                podman), slurm/, ray/, kubernetes/
    data/       the data path: inputs resolved at submit and watched, run paths, outputs,
                fencing, publish, cache, fan-out lists, a full disk
    gang/       the gang path: replica names, the launch contract, an mpirun gang's files
    checkpoint/ CRIU and application checkpoints: support, archives, schedules
    devices/    GPU access (CDI, device nodes, driver mounts) and usage
    engine      the container engine seam (ContainerEngine, ContainerSpec)
    settings    the backend settings a run is started with (RunnerConfig among them)
    layers      resource profiles and params layered onto a step
    logs, logsources   what a container said, and which logs ``hetflow logs`` prints
    secrets     step secrets: looked up in the environment or a secrets file, masked in logs
    doctor      leftovers of crashed runs (containers, networks, leases, stale runs) and repair

Names are loaded on first use, so ``import hetflow.execute`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.base import Backend, Job, JobState, SettlesLaunches
    from hetflow.execute.backends.factory import make_backend
    from hetflow.execute.backends.local.engines import DockerEngine, make_engine
    from hetflow.execute.backends.local.fakeengine import FakeEngine
    from hetflow.execute.backends.local.ociruntime import RuntimeChoice
    from hetflow.execute.backends.local.podman import CliEngine
    from hetflow.execute.backends.registry import DEFAULT_BACKEND, backend_help, backend_plugins, cluster_nodes
    from hetflow.execute.checkpoint import CriuSupport, criu_support, gpu_checkpoint_support, kept_checkpoints
    from hetflow.execute.data.cache import ResultCache
    from hetflow.execute.data.cachekey import Key, StepKeys, cache_key, input_digests
    from hetflow.execute.data.fanout import expand_for_planning
    from hetflow.execute.data.fencing import DISCARDED_WORDS
    from hetflow.execute.data.inputs import DataManifest, ObjectStore, resolve_data, s3_filesystem
    from hetflow.execute.data.outputs import accept_outputs, damaged_outputs, missing_outputs, sha256_of
    from hetflow.execute.data.paths import RunPaths, container_name
    from hetflow.execute.devices.gpu import DRIVER_DIR, GpuAccess, cdi_device_names, driver_mounts, gpu_access
    from hetflow.execute.doctor import Finding, diagnose, repair, tidy
    from hetflow.execute.engine import (
        ContainerEngine,
        ContainerSpec,
        ContainerState,
        Mount,
        Usage,
        cri_lines,
        run_args,
    )
    from hetflow.execute.gang.replicas import LAUNCH_CONTRACT, Quantity, RankVariable, render_contract
    from hetflow.execute.layers import apply_resources, layer_params, param_sources, read_params_file, split_profiles
    from hetflow.execute.logs import Records, group_records, log_tail, parse_line, read_lines
    from hetflow.execute.logsources import (
        CachedOrigin,
        LogSource,
        attempt_label,
        attempt_sources,
        cached_origin,
        recorded_gangs,
        select_steps,
    )
    from hetflow.execute.run.batching import batch_notes
    from hetflow.execute.run.compose import compose_runner
    from hetflow.execute.run.control.lifecycle import pid_alive, spawn_executor, stop_run
    from hetflow.execute.run.control.moves import drain_node, migrate_step
    from hetflow.execute.run.control.recorded import recorded_secrets
    from hetflow.execute.run.control.stopping import DEFAULT_GRACE, grace_from_env, parse_grace
    from hetflow.execute.run.dispatching.dispatch import ClusterDispatch, Decision, Dispatch, LocalDispatch
    from hetflow.execute.run.executor import Ended, build_runner, drive
    from hetflow.execute.run.launch.container import build_spec, container_env, input_mounts
    from hetflow.execute.run.notify import NOTIFY_FAILED, Notifier, Notify, check_urls, payload, urls_of
    from hetflow.execute.run.options import NullReporter, ProcessSeams, Reporter, RunOptions
    from hetflow.execute.run.runner import Runner
    from hetflow.execute.secrets import SECRETS_FILE_ENV, Secrets, activate, gather_available, mask
    from hetflow.execute.settings import RunnerConfig, Settings, load_settings
    from hetflow.execute.submit.checkrun import check_run
    from hetflow.execute.submit.pin import PinResult, default_resolver, pin_images
    from hetflow.execute.submit.prepare import cluster_instance, measured_slowdowns, plan_on_cluster
    from hetflow.execute.submit.preview import Preview, StepPreview, preview_run
    from hetflow.execute.submit.record import create_run, new_run_id, preflight
    from hetflow.execute.submit.rehash import rehash_for_resume
    from hetflow.execute.submit.reset import reset_for_resume
    from hetflow.execute.submit.runplan import RunPlan, apply_images, stored_plan
    from hetflow.execute.submit.session import OpenRun, edited_since, load_recorded, open_run, resume_run, submit_run

_WHERE = {
    "backends.base": ["Backend", "Job", "JobState", "SettlesLaunches"],
    "backends.factory": ["make_backend"],
    "backends.registry": ["DEFAULT_BACKEND", "backend_help", "backend_plugins", "cluster_nodes"],
    "data.cache": ["ResultCache"],
    "data.cachekey": ["Key", "StepKeys", "cache_key", "input_digests"],
    "data.inputs": ["DataManifest", "ObjectStore", "resolve_data", "s3_filesystem"],
    "backends.local.fakeengine": ["FakeEngine"],
    "data.fanout": ["expand_for_planning"],
    "submit.prepare": ["cluster_instance", "measured_slowdowns", "plan_on_cluster"],
    "submit.preview": ["Preview", "StepPreview", "preview_run"],
    "submit.checkrun": ["check_run"],
    "run.launch.container": ["build_spec", "container_env", "input_mounts"],
    "run.dispatching.dispatch": ["ClusterDispatch", "Decision", "Dispatch", "LocalDispatch"],
    "engine": [
        "ContainerEngine",
        "ContainerSpec",
        "ContainerState",
        "Mount",
        "Usage",
        "cri_lines",
        "run_args",
    ],
    "backends.local.podman": ["CliEngine"],
    "backends.local.engines": ["DockerEngine", "make_engine"],
    "backends.local.ociruntime": ["RuntimeChoice"],
    "gang.replicas": ["LAUNCH_CONTRACT", "Quantity", "RankVariable", "render_contract"],
    "devices.gpu": ["DRIVER_DIR", "GpuAccess", "cdi_device_names", "driver_mounts", "gpu_access"],
    "submit.pin": ["PinResult", "default_resolver", "pin_images"],
    "doctor": ["Finding", "diagnose", "repair", "tidy"],
    "run.control.lifecycle": ["pid_alive", "spawn_executor", "stop_run"],
    "submit.reset": ["reset_for_resume"],
    "logs": ["Records", "group_records", "log_tail", "parse_line", "read_lines"],
    "logsources": [
        "CachedOrigin",
        "LogSource",
        "attempt_label",
        "attempt_sources",
        "cached_origin",
        "recorded_gangs",
        "select_steps",
    ],
    "data.fencing": ["DISCARDED_WORDS"],
    "data.outputs": ["accept_outputs", "damaged_outputs", "missing_outputs", "sha256_of"],
    "data.paths": ["RunPaths", "container_name"],
    "run.runner": ["Runner"],
    "run.batching": ["batch_notes"],
    "checkpoint": ["CriuSupport", "criu_support", "gpu_checkpoint_support", "kept_checkpoints"],
    "run.control.moves": ["drain_node", "migrate_step"],
    "run.options": ["NullReporter", "ProcessSeams", "Reporter", "RunOptions"],
    "submit.rehash": ["rehash_for_resume"],
    "submit.runplan": ["RunPlan", "apply_images", "stored_plan"],
    "run.notify": ["NOTIFY_FAILED", "Notifier", "Notify", "check_urls", "payload", "urls_of"],
    "secrets": ["SECRETS_FILE_ENV", "Secrets", "activate", "gather_available", "mask"],
    "run.executor": ["Ended", "build_runner", "drive"],
    "run.compose": ["compose_runner"],
    "submit.session": [
        "OpenRun",
        "edited_since",
        "load_recorded",
        "open_run",
        "resume_run",
        "submit_run",
    ],
    "layers": ["apply_resources", "layer_params", "param_sources", "read_params_file", "split_profiles"],
    "settings": ["RunnerConfig", "Settings", "load_settings"],
    "run.control.stopping": ["DEFAULT_GRACE", "grace_from_env", "parse_grace"],
    "run.control.recorded": ["recorded_secrets"],
    "submit.record": ["create_run", "new_run_id", "preflight"],
}
__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_GRACE",
    "DISCARDED_WORDS",
    "DRIVER_DIR",
    "LAUNCH_CONTRACT",
    "NOTIFY_FAILED",
    "SECRETS_FILE_ENV",
    "Backend",
    "CachedOrigin",
    "CliEngine",
    "ClusterDispatch",
    "ContainerEngine",
    "ContainerSpec",
    "ContainerState",
    "CriuSupport",
    "DataManifest",
    "Decision",
    "Dispatch",
    "DockerEngine",
    "Ended",
    "FakeEngine",
    "Finding",
    "GpuAccess",
    "Job",
    "JobState",
    "Key",
    "LocalDispatch",
    "LogSource",
    "Mount",
    "Notifier",
    "Notify",
    "NullReporter",
    "ObjectStore",
    "OpenRun",
    "PinResult",
    "Preview",
    "ProcessSeams",
    "Quantity",
    "RankVariable",
    "Records",
    "Reporter",
    "ResultCache",
    "RunOptions",
    "RunPaths",
    "RunPlan",
    "Runner",
    "RunnerConfig",
    "RuntimeChoice",
    "Secrets",
    "Settings",
    "SettlesLaunches",
    "StepKeys",
    "StepPreview",
    "Usage",
    "accept_outputs",
    "activate",
    "apply_images",
    "apply_resources",
    "attempt_label",
    "attempt_sources",
    "backend_help",
    "backend_plugins",
    "batch_notes",
    "build_runner",
    "build_spec",
    "cache_key",
    "cached_origin",
    "cdi_device_names",
    "check_run",
    "check_urls",
    "cluster_instance",
    "cluster_nodes",
    "compose_runner",
    "container_env",
    "container_name",
    "create_run",
    "cri_lines",
    "criu_support",
    "damaged_outputs",
    "default_resolver",
    "diagnose",
    "drain_node",
    "drive",
    "driver_mounts",
    "edited_since",
    "expand_for_planning",
    "gather_available",
    "gpu_access",
    "gpu_checkpoint_support",
    "grace_from_env",
    "group_records",
    "input_digests",
    "input_mounts",
    "kept_checkpoints",
    "layer_params",
    "load_recorded",
    "load_settings",
    "log_tail",
    "make_backend",
    "make_engine",
    "mask",
    "measured_slowdowns",
    "migrate_step",
    "missing_outputs",
    "new_run_id",
    "open_run",
    "param_sources",
    "parse_grace",
    "parse_line",
    "payload",
    "pid_alive",
    "pin_images",
    "plan_on_cluster",
    "preflight",
    "preview_run",
    "read_lines",
    "read_params_file",
    "recorded_gangs",
    "recorded_secrets",
    "rehash_for_resume",
    "render_contract",
    "repair",
    "reset_for_resume",
    "resolve_data",
    "resume_run",
    "run_args",
    "s3_filesystem",
    "select_steps",
    "sha256_of",
    "spawn_executor",
    "split_profiles",
    "stop_run",
    "stored_plan",
    "submit_run",
    "tidy",
    "urls_of",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
