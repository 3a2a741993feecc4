"""Cluster-wide settings: how to reach Slurm or Ray, the shared work directory, the
container engine on the nodes, the cluster file to plan with.

Read from ``--config FILE`` or ``$HETFLOW_HOME/config.yaml`` (absent: defaults), then
overridden by the environment, as the engines' own tools do (SLURM_CONF, RAY_ADDRESS):

    HETFLOW_BACKEND          local | slurm | ray
    HETFLOW_CLUSTER          the cluster file (node types) to plan with
    HETFLOW_WORKDIR          the shared work directory for runs (multi-node backends)
    HETFLOW_SLURM_PARTITION, HETFLOW_SLURM_ACCOUNT
    HETFLOW_RAY_ADDRESS      ray://HOST:PORT, HOST:PORT or auto

    # config.yaml
    backend: slurm
    cluster: /etc/hetflow/cluster.yaml
    workdir: /shared/hetflow
    slurm: {partition: gpu, account: ml}
    ray: {address: "ray://head:10001"}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hetflow.errors import SpecError, UsageError
from hetflow.plan import Steer
from hetflow.spec import compose_yaml, read_yaml_text

BACKENDS = ("local", "slurm", "ray")
_KEYS = {"backend", "cluster", "workdir", "engine", "slurm", "ray", "cache", "notify"}
_RUN_KEYS = _KEYS | {"variants", "prefer"}  # stored with a run: the command line's too, never a config file's


@dataclass(frozen=True)
class Settings:
    backend: str = "local"
    cluster: str | None = None
    workdir: str | None = None
    engine: str = "podman"
    slurm: Mapping[str, Any] = field(default_factory=dict)  # the backend's own keys (YAML values)
    ray: Mapping[str, Any] = field(default_factory=dict)
    notify: str | Sequence[str] = ()  # `notify: URL` or a list: POSTs of a run's end and step failures (notify.py)
    cache: bool = True  # the cross-run cache (`hetflow run --no-cache`: False; a resume keeps it)
    variants: Mapping[str, str] = field(default_factory=dict)  # `hetflow run --variant STEP=NAME`
    prefer: str | None = None  # `hetflow run --prefer gpu|cpu`

    @property
    def steer(self) -> Steer:
        """The command line's say over variant choice (``plan.steer``)."""
        return Steer(dict(self.variants), self.prefer)

    def __post_init__(self) -> None:
        # `notify:` is one URL or a list (YAML, JSON): a tuple, so a run's settings read back equal
        if not isinstance(self.notify, str):
            object.__setattr__(self, "notify", tuple(self.notify))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        data = json.loads(text or "{}")
        return cls(**{k: v for k, v in data.items() if k in _RUN_KEYS}) if data else cls()


def load_settings(
    config: Path | None,
    home: Path,
    env: Mapping[str, str],
    *,
    backend: str | None = None,
    cluster: Path | None = None,
) -> Settings:
    """The file (if any), then the environment, then the command line's own flags."""
    path = config or home / "config.yaml"
    data: dict[str, Any] = {}
    if config is not None and not path.exists():
        raise UsageError(f"--config {path}: no such file")
    if path.exists():
        # the reader every YAML file goes through: size, UTF-8, NUL, depth and alias limits
        text = read_yaml_text(path, "a YAML settings file")
        loaded, _, problems = compose_yaml(text, str(path)) if text.strip() else ({}, {}, [])
        if problems:
            raise SpecError(problems)
        loaded = loaded or {}
        if not isinstance(loaded, dict):
            raise UsageError(f"{path}: settings are a mapping with keys {', '.join(sorted(_KEYS))}")
        unknown = sorted(set(loaded) - _KEYS)
        if unknown:
            raise UsageError(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_KEYS))}")
        data = dict(loaded)
    for key in ("slurm", "ray"):
        if not isinstance(data.get(key, {}), dict):
            raise UsageError(f"{path}: {key!r} must be a mapping")
        data[key] = {str(k): v for k, v in (data.get(key) or {}).items()}
    overrides = {"HETFLOW_BACKEND": "backend", "HETFLOW_CLUSTER": "cluster", "HETFLOW_WORKDIR": "workdir"}
    for var, key in overrides.items():
        if env.get(var):
            data[key] = env[var]
    for var, (section, key) in {
        "HETFLOW_SLURM_PARTITION": ("slurm", "partition"),
        "HETFLOW_SLURM_ACCOUNT": ("slurm", "account"),
        "HETFLOW_RAY_ADDRESS": ("ray", "address"),
    }.items():
        if env.get(var):
            data[section] = {**data[section], key: env[var]}
    if backend is not None:
        data["backend"] = backend
    if cluster is not None:
        data["cluster"] = str(cluster)
    chosen = str(data.get("backend", "local"))
    if chosen not in BACKENDS:
        raise UsageError(
            f"backend {chosen!r} is not one of {', '.join(BACKENDS)} (--backend, HETFLOW_BACKEND or {path})"
        )
    if chosen != "local" and not data.get("cluster"):
        raise UsageError(
            f"the {chosen} backend plans on a cluster file: give --cluster FILE (node types; see examples/clusters), "
            f"HETFLOW_CLUSTER, or 'cluster:' in {path}"
        )
    return Settings(**{k: v for k, v in data.items() if k in _KEYS})
