"""Build the ContainerSpec of one step attempt: a pure function of its inputs."""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path

from hetflow.execute.checkpoint.app import app_checkpoint_env, app_checkpoint_mounts
from hetflow.execute.data.inputs import DIR, S3, DataManifest
from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.devices.gpu import GpuAccess
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.kube import LABEL_ATTEMPT, LABEL_RUN, LABEL_STEP
from hetflow.spec import DATA_PREFIX, RESERVED_ENV, Step, Variant


def build_spec(
    *,
    run_id: str,
    step_name: str,
    step: Step,
    variant: Variant,
    attempt: int,
    uid: int,
    gid: int,
    paths: RunPaths,
    access: GpuAccess,
    data: DataManifest | None = None,
    secrets: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """``secrets``: the values of the step's ``secrets`` (``execute.secrets``), given as
    variables (over the step's own ``env``) and as files under /run/secrets."""
    name = container_name(run_id, step_name, attempt)
    mounts = [Mount(str(paths.staging(step_name, attempt)), "/out", read_only=False)]
    mounts += input_mounts(step, paths, data or DataManifest())
    mounts += list(access.mounts)
    mounts += app_checkpoint_mounts(step_name, step, paths)  # the same folder for every attempt
    return ContainerSpec(
        name=name,
        image=variant.image,
        command=variant.command,
        user=f"{uid}:{gid}",
        labels={LABEL_RUN: run_id, LABEL_STEP: step_name, LABEL_ATTEMPT: str(attempt)},
        env=container_env(
            {**variant.env, **(secrets or {})},
            {
                **access.env,
                "HETFLOW_RUN_ID": run_id,
                "HETFLOW_STEP": step_name,
                "HETFLOW_ATTEMPT": str(attempt),
                **app_checkpoint_env(step),
            },
        ),
        mounts=tuple(mounts),
        devices=access.devices,
        cdi_devices=access.cdi_devices,
        group_add=access.groups,
        cpus=variant.resources.cpus,
        memory=variant.resources.memory,
        network=step.network,
        log_path=str(paths.log(step_name, attempt)),
        secrets=dict(secrets or {}),
        passwd=step.checkpoint is None or not step.checkpoint.transparent,
        # podman's --time takes whole seconds
        stop_grace=None if step.stop_grace is None else math.ceil(step.stop_grace),
    )


def input_mounts(step: Step, paths: RunPaths, data: DataManifest | None = None) -> list[Mount]:
    """``inputs: {matrix: generate/matrix.npy}`` -> generate's accepted output, read-only,
    at /in/matrix/matrix.npy; a gathered fan-out's ``{parts/3: align.3/out.txt}`` at
    /in/parts/3/out.txt; workflow data (``data.NAME[/PATH]``) from where it was resolved."""
    mounts = []
    for key, ref in sorted(step.inputs.items()):
        if ref.startswith(DATA_PREFIX):
            mounts += data_mounts(key, ref, data or DataManifest())
            continue
        parent, _, rel = ref.partition("/")
        rel = posixpath.normpath(rel)
        source = paths.step_out(parent) / rel
        mounts.append(Mount(str(source), f"/in/{key}/{posixpath.basename(rel)}", read_only=True))
    return mounts


def data_mounts(key: str, ref: str, data: DataManifest) -> list[Mount]:
    """``data.NAME`` -> every file of the set under /in/KEY/ (a directory: the directory
    itself); ``data.NAME/PATH`` -> that file or directory at /in/KEY/basename(PATH)."""
    ds, rel = data.lookup(ref)
    target = f"/in/{key}"
    if ds.kind in (DIR, S3):
        source = Path(ds.root) / rel if rel else Path(ds.root)
        if source.is_dir() or not rel:
            return [Mount(str(source), f"{target}/{posixpath.basename(rel)}" if rel else target, read_only=True)]
    mounts = []
    for f in ds.files:
        if not rel:
            mounts.append(Mount(f.source, f"{target}/{f.rel}", read_only=True))
        elif f.rel == rel:
            mounts.append(Mount(f.source, f"{target}/{posixpath.basename(rel)}", read_only=True))
        elif f.rel.startswith(rel + "/"):
            mounts.append(
                Mount(f.source, f"{target}/{posixpath.basename(rel)}/{f.rel[len(rel) + 1 :]}", read_only=True)
            )
    return mounts


def container_env(user_env: Mapping[str, str], gpu_env: Mapping[str, str]) -> dict[str, str]:
    """The user's variables minus the reserved ones, then hetflow's, which always win."""
    env = {k: v for k, v in user_env.items() if k not in RESERVED_ENV}
    env["HOME"] = "/tmp"  # the root file system is read-only; /tmp is the writable tmpfs
    env.update(gpu_env)
    return env


def reserved_in(envs: Sequence[Mapping[str, str]]) -> list[str]:
    return sorted({k for e in envs for k in e if k in RESERVED_ENV})
