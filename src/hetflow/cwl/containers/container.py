"""One CWL job as hetflow's container: a pure function of what cwltool worked out.

cwltool's path mapper gives the mounts (``--mount=type=bind,source=...,target=...[,readonly]``
arguments, as its docker job writes them; ``mounts_from_args`` reads them back), the job's
command line, environment and redirections.  The container is hetflow's hardened one
(``execute.run_args``: no capabilities, read-only root, tmpfs /tmp, the submitter's UID:GID, no
network unless NetworkAccess asks); its working directory and stdin/stdout/stderr are set by a
``/bin/sh`` line before the tool's own command (every image must have /bin/sh), since a backend
runs a container detached and keeps its output as a log."""

from __future__ import annotations

import csv
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hetflow.cwl.requests import JobRequest
from hetflow.execute import ContainerSpec, GpuAccess, Mount
from hetflow.kube import LABEL_ATTEMPT, LABEL_RUN, LABEL_STEP

LABEL_CWL = "hetflow/cwl-job"  # the CWL job's own name (step, scatter index)
# Given back to a job that runs as root (hetflow run as root): what tools expect of root in
# their own output directory (tar restores owners, cp -p keeps modes); every other capability
# stays dropped, with no-new-privileges and the read-only root.  A job run as any other user
# gets none.
ROOT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER")


@dataclass(frozen=True)
class Redirects:
    workdir: str  # the container's outdir
    stdin: str | None = None  # paths inside the container
    stdout: str | None = None
    stderr: str | None = None


def mounts_from_args(args: Iterable[str]) -> list[Mount]:
    """The ``--mount=`` arguments cwltool's docker job appends, as hetflow mounts; a later
    mount on the same target replaces an earlier one (podman refuses two)."""
    out: dict[str, Mount] = {}
    for arg in args:
        if not arg.startswith("--mount="):
            continue
        fields = next(csv.reader([arg[len("--mount=") :]]))
        opts: dict[str, str] = {}
        for f in fields:
            key, _, value = f.partition("=")
            opts[key] = value
        out[opts["target"]] = Mount(opts["source"], opts["target"], read_only="readonly" in opts)
    return list(out.values())


def redirections(io: Redirects) -> str:
    """`` <IN >OUT 2>ERR`` for a shell line, each quoted; "" for none."""
    pairs = (("<", io.stdin), (">", io.stdout), ("2>", io.stderr))
    return "".join(f" {op} {shlex.quote(path)}" for op, path in pairs if path is not None)


def wrapped_command(command: Sequence[str], io: Redirects) -> tuple[str, ...]:
    """``sh -c 'cd OUTDIR && exec "$@" <IN >OUT 2>ERR' sh COMMAND...``: the tool's own
    arguments pass untouched as "$@"."""
    line = f'cd {shlex.quote(io.workdir)} && exec "$@"' + redirections(io)
    return ("/bin/sh", "-c", line, "sh", *command)


def container_spec(
    *,
    name: str,
    run_id: str,
    step: str,
    attempt: int = 1,
    cwl_name: str,
    image: str,
    command: Sequence[str],
    io: Redirects,
    env: Mapping[str, str],
    mounts: Sequence[Mount],
    request: JobRequest,
    user: str,
    network: bool,
    log_path: str,
    max_cpus: float | None = None,
    access: GpuAccess | None = None,
    entrypoint: Sequence[str] = (),
) -> ContainerSpec:
    """``access``: the devices, mounts and variables of the job's GPUs (``execute.gpu_access``);
    ``entrypoint``: the image's ENTRYPOINT, which a CWL tool's command follows (as under
    ``docker run``): the /bin/sh line replaces it and runs it in front of the command."""
    cpus = request.cpus if max_cpus is None else min(request.cpus, max_cpus)
    access = access or GpuAccess()
    line = wrapped_command([*entrypoint, *command], io)
    return ContainerSpec(
        name=name,
        image=image,
        entrypoint=line[:4],  # /bin/sh -c LINE sh: in place of the image's own
        command=line[4:],
        user=user,
        labels={LABEL_RUN: run_id, LABEL_STEP: step, LABEL_ATTEMPT: str(attempt), LABEL_CWL: cwl_name[:63]},
        env={**env, **access.env},
        mounts=(*mounts, *access.mounts),
        devices=access.devices,
        cdi_devices=access.cdi_devices,
        group_add=access.groups,
        cpus=cpus,
        memory=request.memory,
        network=network,
        log_path=log_path,
        tmpfs_size=f"{request.tmpfs_mib}m",
        cap_add=ROOT_CAPS if user.split(":")[0] == "0" else (),
    )
