"""A run's job files in the shared work directory (``WORKDIR/RUN``), written by the
backend (NAME.sh, NAME.jobid) and by the job script (NAME.start, NAME.exit, NAME.err,
NAME.out); see the package's docstring for what each holds."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hetflow.config import containers_conf

# What submit clears before a new attempt, and release removes (NAME.out stays when not
# empty: podman's errors and slurmstepd's notes are diagnostics).
PER_ATTEMPT = (".exit", ".start", ".err", ".jobid", ".env", ".usage", ".wait")  # ``usage``, ``checkpoint``
RELEASED = (".sh", *PER_ATTEMPT)
# NAME.checkpointed (``checkpoint``) is left to the job script, which reads and removes it as
# it ends: ``hetflow stop --checkpoint`` releases the job before its script has ended.
MARKER = ".checkpointed"
# A gang's attempt also leaves its task script and each replica's host, exit code and
# podman stderr (``gang``).
GANG_FILES = (".task.sh", ".r*.host", ".r*.exit", ".r*.err", ".r*.env")


def clear(jobdir: Path, name: str) -> None:
    """Before a new attempt under ``name``: what an earlier one left goes."""
    for suffix in (*PER_ATTEMPT, MARKER):
        (jobdir / f"{name}{suffix}").unlink(missing_ok=True)
    for pattern in GANG_FILES:
        for p in jobdir.glob(f"{name}{pattern}"):
            p.unlink(missing_ok=True)


def read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def exit_code(path: Path) -> int | None:
    """The code in NAME.exit, whichever job wrote it."""
    text = read(path)
    return int(text.split()[0]) if text and text.split()[0].lstrip("-").isdigit() else None


def read_exit(path: Path, job_id: str) -> int | None:
    """The exit code in NAME.exit, if that file belongs to this job id (not an earlier one)."""
    text = read(path)
    if not text:
        return None
    parts = text.split()
    if not parts[0].isdigit() or (job_id and len(parts) > 1 and parts[1] != job_id):
        return None
    return int(parts[0])


def exit_verdict(path: Path) -> str:
    """NAME.exit's word after the code and job id (``checkpointed``), "" when none."""
    parts = (read(path) or "").split()
    return parts[2] if len(parts) > 2 else ""


def read_start(path: Path) -> dict[str, str]:
    """NAME.start: ``node=``, ``job=``, ``gpus=`` lines."""
    out: dict[str, str] = {}
    for line in (read(path) or "").splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


def submitted(jobdir: Path) -> set[str]:
    """Names of the jobs submitted into this run's folder (their NAME.jobid)."""
    return {p.name[: -len(".jobid")] for p in jobdir.glob("*.jobid")} if jobdir.is_dir() else set()


def node_files(workdir: Path, conf: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """The containers.conf and the empty hooks directory the nodes use (shared)."""
    workdir.mkdir(parents=True, exist_ok=True)
    hooks = workdir / "hooks.d"  # empty: no OCI hook may add GPUs (engine.CliEngine)
    hooks.mkdir(exist_ok=True)
    if conf:
        return conf, str(hooks)
    copy = workdir / "containers.conf"
    text = containers_conf(env).read_text()
    if not copy.exists() or copy.read_text() != text:
        copy.write_text(text)
    return str(copy), str(hooks)


def remove(workdir: Path, name: str) -> None:
    """Forget a finished job: its files go, except a non-empty NAME.out."""
    for d in [d for d in workdir.glob("*") if (d / f"{name}.jobid").exists()]:
        for suffix in RELEASED:
            (d / f"{name}{suffix}").unlink(missing_ok=True)
        for pattern in GANG_FILES:
            for p in d.glob(f"{name}{pattern}"):
                p.unlink(missing_ok=True)
        out = d / f"{name}.out"
        if out.exists() and out.stat().st_size == 0:
            out.unlink()
