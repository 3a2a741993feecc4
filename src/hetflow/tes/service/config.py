"""What ``hetflow tes serve --config FILE`` reads: where file:// URLs may point, who may
submit and how much each may run, and how many tasks run at once.

    file_roots: [/data/tes]          # file:// inputs and outputs only under these (else 400)
    auth: tokens                      # or none (the default: one user, "local", an admin)
    max_running: 4                    # tasks running at once on this server (default: CPUs)
    default_limits: {max_running: 2, max_gpus: 1}
    users: {alice: {max_running: 8}}  # per user, over default_limits
    s3: {endpoint: http://127.0.0.1:9000}  # s3:// inputs and outputs (credentials: AWS_* variables)
    task_network: true                # executors' containers get podman's bridge network (outbound
                                      # access, e.g. to an S3 endpoint); default false: no network
    run_settings: slurm.yaml          # hetflow's settings file for the backend (as `hetflow run --config`;
                                      # default: HETFLOW_HOME/config.yaml); relative to this file
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hetflow.errors import UsageError

LOCAL_USER = "local"  # the one user of a server without tokens


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_running: int | None = Field(default=None, ge=1)  # None: no limit of its own
    max_gpus: int | None = Field(default=None, ge=0)


class S3(BaseModel):
    """Where s3:// URLs are read and written; credentials and region come from the usual AWS
    variables and files (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws), never this file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    endpoint: str | None = Field(default=None, pattern=r"^https?://")  # None: AWS_ENDPOINT_URL, else AWS


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file_roots: list[Path] = Field(default_factory=list)
    auth: Literal["none", "tokens"] = "none"
    max_running: int | None = Field(default=None, ge=1)
    default_limits: Limits = Field(default_factory=Limits)
    users: dict[str, Limits] = Field(default_factory=dict)
    s3: S3 | None = None
    task_network: bool = False
    run_settings: Path | None = None


@dataclass(frozen=True)
class TesConfig:
    """The service's settings (see the module docstring); built whole by ``load_config``."""

    file_roots: tuple[Path, ...] = ()
    tokens: bool = False
    max_running: int = field(default_factory=lambda: os.cpu_count() or 1)
    default_limits: Limits = field(default_factory=Limits)
    users: dict[str, Limits] = field(default_factory=dict)
    backend: str = "local"
    s3: S3 | None = None  # None: s3:// URLs end the task SYSTEM_ERROR, saying so
    run_settings: Path | None = None  # the backend's settings file (None: hetflow's default one)
    task_network: bool = False  # executors get a network (podman's bridge, as a step's ``network: true``)

    def limits(self, user: str) -> Limits:
        own = self.users.get(user)
        if own is None:
            return self.default_limits
        return Limits(
            max_running=own.max_running if own.max_running is not None else self.default_limits.max_running,
            max_gpus=own.max_gpus if own.max_gpus is not None else self.default_limits.max_gpus,
        )

    def under_roots(self, path: Path) -> bool:
        resolved = path.resolve()
        return any(resolved == r or r in resolved.parents for r in self.file_roots)


def load_config(path: Path | None, *, backend: str = "local", file_roots: tuple[Path, ...] = ()) -> TesConfig:
    """The config file at ``path`` (None: the defaults), with ``file_roots`` (``--file-root``)
    added; a bad file is a UsageError naming the field and what to change."""
    data: _File = _File()
    if path is not None:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise UsageError(f"--config {path}: cannot read it ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise UsageError(f"--config {path}: not YAML ({exc})") from None
        try:
            data = _File.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UsageError(f"{path}: {where}: {first['msg']}") from None
    roots = tuple(p.resolve() for p in (*data.file_roots, *file_roots))
    for root in roots:
        if not root.is_dir():
            raise UsageError(f"file root {root} is not a directory; create it or give another")
    return TesConfig(
        file_roots=roots,
        tokens=data.auth == "tokens",
        max_running=data.max_running or (os.cpu_count() or 1),
        default_limits=data.default_limits,
        users=dict(data.users),
        backend=backend,
        s3=data.s3,
        task_network=data.task_network,
        run_settings=_beside(path, data.run_settings),
    )


def _beside(config: Path | None, path: Path | None) -> Path | None:
    """``path`` as given in ``config``: a relative one is relative to that file."""
    if path is None or config is None or path.is_absolute():
        return path
    return config.parent / path
