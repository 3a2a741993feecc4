"""Running steps: from a recorded run to containers or cluster jobs, and back into the store.

    session     submit_run / open_run / resume_run: what ``hetflow run``, ``resume``
                and the detached executor do (the CLI only parses and prints); executor:
                drive, build_runner, Ended: an opened run driven to its end
    prepare     pin images and plan, once per run; runplan: the RunPlan stored with the run
    runner      the loop: dispatch ready steps, poll, finalize, retry, persist; runoptions:
                what a Runner is given (RunOptions, ProcessSeams, Reporter, the dispatch)
    dispatch    where a step runs: LocalDispatch (capacity, GPU leases, variant chooser)
                or ClusterDispatch (the cluster plan's placements)
    attempts    attempts in flight: accept outputs, retry with backoff, fail
    lifecycle   stop_run, reset_for_resume, adopting what a dead executor left, pid_alive
    stopping    a stop's grace period (--grace, HETFLOW_STOP_GRACE) and `hetflow stop`'s request
    doctor      leftovers of crashed runs (containers, networks, leases, stale runs) and repair
    engine      the container engine seam; podman: podman (CliEngine); engines: docker, make_engine;
                fakeengine: the fake; cgroups, exits, logs: what a container used and said;
                logsources: which logs ``hetflow logs`` prints (a step, a fan-out, a gang's ranks);
                ociruntime: runc or crun under podman (HETFLOW_OCI_RUNTIME, one cached probe)
    images      pin each step's image to the build for this node
    fanout      fan-outs expanded at submit or run time
    settings    the backend settings a run is started with
    notify      JSON POSTs of a run's step failures and end (--notify URL), off the run's path
    secrets     step secrets: looked up in the environment or a secrets file, masked in logs
    launch/     the launch path: Launcher, one attempt's container, its GPUs
    data/       the data path: inputs resolved at submit, run paths, outputs, publish, cache
    gang/       the gang path: replica names, the launch contract, an mpirun gang's files
                and commands (pure: no engine calls)
    backends/   the engines a run can use (local, Slurm, Ray; a fake for tests), made by
                backends.make_backend

Names are loaded on first use, so ``import hetflow.execute`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.factory import make_backend
    from hetflow.execute.batching import batch_notes
    from hetflow.execute.checkpoint import CriuSupport, criu_support, kept_checkpoints
    from hetflow.execute.data.cache import Key, ResultCache, StepKeys, cache_key, input_digests
    from hetflow.execute.data.fencing import DISCARDED_WORDS
    from hetflow.execute.data.inputs import DataManifest, resolve_data
    from hetflow.execute.data.outputs import accept_outputs, damaged_outputs, missing_outputs, sha256_of
    from hetflow.execute.data.paths import RunPaths, container_name
    from hetflow.execute.devices.gpu import DRIVER_DIR, GpuAccess, cdi_device_names, driver_mounts, gpu_access
    from hetflow.execute.dispatch import ClusterDispatch, Decision, Dispatch, LocalDispatch
    from hetflow.execute.doctor import Finding, diagnose, repair, tidy
    from hetflow.execute.engine import (
        LABEL_ATTEMPT,
        LABEL_RUN,
        LABEL_STEP,
        ContainerEngine,
        ContainerSpec,
        ContainerState,
        Mount,
        Usage,
        cri_lines,
        run_args,
    )
    from hetflow.execute.engines import DockerEngine, make_engine
    from hetflow.execute.executor import Ended, build_runner, drive
    from hetflow.execute.fakeengine import FakeEngine
    from hetflow.execute.fanout import expand_for_planning
    from hetflow.execute.gang.replicas import LAUNCH_CONTRACT, Quantity, RankVariable, render_contract
    from hetflow.execute.images import PinResult, default_resolver, pin_images
    from hetflow.execute.launch.container import build_spec, container_env, input_mounts
    from hetflow.execute.lifecycle import pid_alive, reset_for_resume, spawn_executor, stop_run
    from hetflow.execute.logs import Records, group_records, log_tail, parse_line, read_lines
    from hetflow.execute.logsources import LogSource, attempt_label, attempt_sources, recorded_gangs, select_steps
    from hetflow.execute.moves import drain_node, migrate_step
    from hetflow.execute.notify import NOTIFY_FAILED, Notifier, Notify, check_urls, payload, urls_of
    from hetflow.execute.ociruntime import RuntimeChoice
    from hetflow.execute.podman import CliEngine
    from hetflow.execute.prepare import cluster_instance, kubernetes_inventory, measured_slowdowns
    from hetflow.execute.preview import Preview, StepPreview, check_run, preview_run
    from hetflow.execute.profiles import apply_resources, layer_params, read_params_file, split_profiles
    from hetflow.execute.rehash import rehash_for_resume
    from hetflow.execute.runconfig import RunnerConfig
    from hetflow.execute.runner import Runner
    from hetflow.execute.runoptions import NullReporter, ProcessSeams, Reporter, RunOptions
    from hetflow.execute.runplan import RunPlan, apply_images, stored_plan
    from hetflow.execute.secrets import SECRETS_FILE_ENV, Secrets, activate, gather_available, mask
    from hetflow.execute.session import OpenRun, edited_since, load_recorded, open_run, resume_run, submit_run
    from hetflow.execute.settings import Settings, load_settings
    from hetflow.execute.stopping import DEFAULT_GRACE, grace_from_env, parse_grace
    from hetflow.execute.submit import create_run, new_run_id, preflight

_WHERE = {
    "backends.factory": ["make_backend"],
    "runconfig": ["RunnerConfig"],
    "data.cache": ["Key", "ResultCache", "StepKeys", "cache_key", "input_digests"],
    "data.inputs": ["DataManifest", "resolve_data"],
    "fakeengine": ["FakeEngine"],
    "fanout": ["expand_for_planning"],
    "prepare": ["cluster_instance", "kubernetes_inventory", "measured_slowdowns"],
    "preview": ["Preview", "StepPreview", "check_run", "preview_run"],
    "launch.container": ["build_spec", "container_env", "input_mounts"],
    "dispatch": ["ClusterDispatch", "Decision", "Dispatch", "LocalDispatch"],
    "engine": [
        "LABEL_ATTEMPT",
        "LABEL_RUN",
        "LABEL_STEP",
        "ContainerEngine",
        "ContainerSpec",
        "ContainerState",
        "Mount",
        "Usage",
        "cri_lines",
        "run_args",
    ],
    "podman": ["CliEngine"],
    "engines": ["DockerEngine", "make_engine"],
    "ociruntime": ["RuntimeChoice"],
    "gang.replicas": ["LAUNCH_CONTRACT", "Quantity", "RankVariable", "render_contract"],
    "devices.gpu": ["DRIVER_DIR", "GpuAccess", "cdi_device_names", "driver_mounts", "gpu_access"],
    "images": ["PinResult", "default_resolver", "pin_images"],
    "doctor": ["Finding", "diagnose", "repair", "tidy"],
    "lifecycle": ["pid_alive", "reset_for_resume", "spawn_executor", "stop_run"],
    "logs": ["Records", "group_records", "log_tail", "parse_line", "read_lines"],
    "logsources": ["LogSource", "attempt_label", "attempt_sources", "recorded_gangs", "select_steps"],
    "data.fencing": ["DISCARDED_WORDS"],
    "data.outputs": ["accept_outputs", "damaged_outputs", "missing_outputs", "sha256_of"],
    "data.paths": ["RunPaths", "container_name"],
    "runner": ["Runner"],
    "batching": ["batch_notes"],
    "checkpoint": ["CriuSupport", "criu_support", "kept_checkpoints"],
    "moves": ["drain_node", "migrate_step"],
    "runoptions": ["NullReporter", "ProcessSeams", "Reporter", "RunOptions"],
    "rehash": ["rehash_for_resume"],
    "runplan": ["RunPlan", "apply_images", "stored_plan"],
    "notify": ["NOTIFY_FAILED", "Notifier", "Notify", "check_urls", "payload", "urls_of"],
    "secrets": ["SECRETS_FILE_ENV", "Secrets", "activate", "gather_available", "mask"],
    "executor": ["Ended", "build_runner", "drive"],
    "session": [
        "OpenRun",
        "edited_since",
        "load_recorded",
        "open_run",
        "resume_run",
        "submit_run",
    ],
    "profiles": ["apply_resources", "layer_params", "read_params_file", "split_profiles"],
    "settings": ["Settings", "load_settings"],
    "stopping": ["DEFAULT_GRACE", "grace_from_env", "parse_grace"],
    "submit": ["create_run", "new_run_id", "preflight"],
}
__all__ = [
    "DEFAULT_GRACE",
    "DISCARDED_WORDS",
    "DRIVER_DIR",
    "LABEL_ATTEMPT",
    "LABEL_RUN",
    "LABEL_STEP",
    "LAUNCH_CONTRACT",
    "NOTIFY_FAILED",
    "SECRETS_FILE_ENV",
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
    "Key",
    "LocalDispatch",
    "LogSource",
    "Mount",
    "Notifier",
    "Notify",
    "NullReporter",
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
    "StepKeys",
    "StepPreview",
    "Usage",
    "accept_outputs",
    "activate",
    "apply_images",
    "apply_resources",
    "attempt_label",
    "attempt_sources",
    "batch_notes",
    "build_runner",
    "build_spec",
    "cache_key",
    "cdi_device_names",
    "check_run",
    "check_urls",
    "cluster_instance",
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
    "grace_from_env",
    "group_records",
    "input_digests",
    "input_mounts",
    "kept_checkpoints",
    "kubernetes_inventory",
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
    "parse_grace",
    "parse_line",
    "payload",
    "pid_alive",
    "pin_images",
    "preflight",
    "preview_run",
    "read_lines",
    "read_params_file",
    "recorded_gangs",
    "rehash_for_resume",
    "render_contract",
    "repair",
    "reset_for_resume",
    "resolve_data",
    "resume_run",
    "run_args",
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
