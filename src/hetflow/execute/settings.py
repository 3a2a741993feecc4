"""Cluster-wide settings: how to reach Slurm or Ray, the shared work directory, the
container engine on the nodes, the cluster file to plan with.

Read from ``--config FILE`` or ``$HETFLOW_HOME/config.yaml`` (absent: defaults), then
overridden by the environment, as the engines' own tools do (SLURM_CONF, RAY_ADDRESS):

    HETFLOW_BACKEND          local | slurm | ray | kubernetes
    HETFLOW_CLUSTER          the cluster file (node types) to plan with
    HETFLOW_WORKDIR          the shared work directory for runs (multi-node backends)
    HETFLOW_SLURM_PARTITION, HETFLOW_SLURM_ACCOUNT
    HETFLOW_RAY_ADDRESS      ray://HOST:PORT, HOST:PORT or auto
    HETFLOW_KUBE_NAMESPACE, HETFLOW_KUBE_CONTEXT (KUBECONFIG as kubectl reads it)

    # config.yaml
    backend: slurm
    cluster: /etc/hetflow/cluster.yaml
    workdir: /shared/hetflow
    slurm: {partition: gpu, account: ml}
    ray: {address: "ray://head:10001"}
    kubernetes: {namespace: ml, context: prod}   # see execute/backends/kubernetes/settings.py
    params: {lr: 0.01}                           # defaults for workflows' params
    resources: {template: {python: {memory: 2Gi}}, step: {train: {cpus: 8}}}
    profiles:                                    # hetflow run --profile slurm,gpu
      slurm: {backend: slurm, cluster: /etc/hetflow/cluster.yaml}
      gpu: {params: {device: cuda}, resources: {step: {train: {gpus: 1}}}}

``params:``, ``resources:`` and ``profiles:`` are read by ``profiles`` (which says the order
everything is layered in).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hetflow.errors import SpecError, UsageError
from hetflow.execute.layers import Layers, check_section, choose_profiles
from hetflow.plan import Steer
from hetflow.spec import Origin, compose_yaml, line_of, read_yaml_text

BACKENDS = ("local", "slurm", "ray", "kubernetes")
_KEYS = {"backend", "cluster", "workdir", "engine", "slurm", "ray", "kubernetes", "cache", "notify"}
_BACKEND_SECTIONS = ("slurm", "ray", "kubernetes")
_SECTIONS = {"params", "resources"}  # what a file's top level and a profile give a run, beside _KEYS
_FILE_KEYS = _KEYS | _SECTIONS | {"profiles"}
# stored with a run: the command line's too, never a config file's; the resource overrides
# (a run read back by its executor or a resume applies them again) and the profiles chosen
_RUN_KEYS = _KEYS | {"variants", "prefer", "resources", "profiles"}


@dataclass(frozen=True)
class Settings:
    backend: str = "local"
    cluster: str | None = None
    workdir: str | None = None
    engine: str = "podman"
    slurm: Mapping[str, Any] = field(default_factory=dict)  # the backend's own keys (YAML values)
    ray: Mapping[str, Any] = field(default_factory=dict)
    kubernetes: Mapping[str, Any] = field(default_factory=dict)
    notify: str | Sequence[str] = ()  # `notify: URL` or a list: POSTs of a run's end and step failures (notify.py)
    cache: bool = True  # the cross-run cache (`hetflow run --no-cache`: False; a resume keeps it)
    variants: Mapping[str, str] = field(default_factory=dict)  # `hetflow run --variant STEP=NAME`
    prefer: str | None = None  # `hetflow run --prefer gpu|cpu`
    params: Mapping[str, Any] = field(default_factory=dict)  # the file's and the profiles' params (not recorded:
    param_origins: Mapping[str, Origin] = field(default_factory=dict)  # the run records the params it ran with)
    resources: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)  # spec.overrides
    resource_origins: Mapping[tuple[str, str], Origin] = field(default_factory=dict)
    profiles: tuple[str, ...] = ()  # `hetflow run --profile a,b`, in order

    @property
    def steer(self) -> Steer:
        """The command line's say over variant choice (``plan.steer``)."""
        return Steer(dict(self.variants), self.prefer)

    def __post_init__(self) -> None:
        # `notify:` is one URL or a list (YAML, JSON): a tuple, so a run's settings read back equal
        if not isinstance(self.notify, str):
            object.__setattr__(self, "notify", tuple(self.notify))

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k in _RUN_KEYS}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        data = {k: v for k, v in json.loads(text or "{}").items() if k in _RUN_KEYS}
        if "profiles" in data:
            data["profiles"] = tuple(data["profiles"])
        return cls(**data) if data else cls()


def load_settings(
    config: Path | None,
    home: Path,
    env: Mapping[str, str],
    *,
    backend: str | None = None,
    cluster: Path | None = None,
    profiles: Sequence[str] = (),
) -> Settings:
    """The file (if any), then the environment, then the profiles chosen (in order), then
    the command line's own flags."""
    path = config or home / "config.yaml"
    data: dict[str, Any] = {}
    lines: Mapping[tuple[str | int, ...], int] = {}
    if config is not None and not path.exists():
        raise UsageError(f"--config {path}: no such file")
    if profiles and not path.exists():
        raise UsageError(
            f"--profile {','.join(profiles)}: there is no settings file ({path}); profiles are defined under"
            " 'profiles:' in it, or in the file --config FILE names"
        )
    if path.exists():
        data, lines = _read(path)
    layers, chosen = _layers(data, lines, path, profiles)
    for key in _BACKEND_SECTIONS:
        for where, part in [("", data), *((f"profile {n!r}: ", b) for n, b in chosen)]:
            if not isinstance(part.get(key, {}), dict):
                raise UsageError(f"{path}: {where}{key!r} must be a mapping")
        data[key] = {str(k): v for k, v in (data.get(key) or {}).items()}
    _environment(data, env)
    for _, body in chosen:  # a profile is chosen on this command line: it wins over the environment
        for key, value in body.items():
            if key in _BACKEND_SECTIONS:
                data[key] = {**data[key], **{str(k): v for k, v in (value or {}).items()}}
            elif key in _KEYS:
                data[key] = value
    if backend is not None:
        data["backend"] = backend
    if cluster is not None:
        data["cluster"] = str(cluster)
    chosen_backend = str(data.get("backend", "local"))
    if chosen_backend not in BACKENDS:
        raise UsageError(
            f"backend {chosen_backend!r} is not one of {', '.join(BACKENDS)} (--backend, HETFLOW_BACKEND, a profile"
            f" or {path})"
        )
    # Kubernetes: the API server lists the nodes (``backends.kubernetes.inventory``)
    if chosen_backend not in ("local", "kubernetes") and not data.get("cluster"):
        raise UsageError(
            f"the {chosen_backend} backend plans on a cluster file: give --cluster FILE (node types; see"
            f" examples/clusters), HETFLOW_CLUSTER, or 'cluster:' in {path}"
        )
    return Settings(
        **{k: v for k, v in data.items() if k in _KEYS},
        params=layers.params,
        param_origins=layers.param_origins,
        resources=layers.resources,
        resource_origins=layers.resource_origins,
        profiles=tuple(profiles),
    )


def _layers(
    data: dict[str, Any], lines: Mapping[tuple[str | int, ...], int], path: Path, profiles: Sequence[str]
) -> tuple[Layers, list[tuple[str, dict[str, Any]]]]:
    """The file's params and resources with the chosen profiles' over them, and the profiles
    (name, body) in the order given; each checked (``profiles.check_section``)."""
    layers = Layers()
    problem = check_section(data, lines, str(path), ())
    if problem is not None:
        raise UsageError(problem)
    layers.add(data, lines, str(path), (), "")
    chosen = choose_profiles(data.pop("profiles", None), lines, str(path), profiles)
    for name, body in chosen:
        loc = ("profiles", name)
        unknown = sorted(set(body) - _KEYS - _SECTIONS, key=str)
        if unknown:
            raise UsageError(
                f"{path}:{line_of(lines, (*loc, unknown[0]))}: profile {name!r}: unknown key(s)"
                f" {', '.join(map(str, unknown))}; a profile sets {', '.join(sorted(_KEYS | _SECTIONS))}"
            )
        problem = check_section(body, lines, str(path), loc)
        if problem is not None:
            raise UsageError(problem)
        layers.add(body, lines, str(path), loc, f"profile {name!r}")
    return layers, chosen


def _environment(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """HETFLOW_BACKEND and the others over the file's values, in place."""
    overrides = {"HETFLOW_BACKEND": "backend", "HETFLOW_CLUSTER": "cluster", "HETFLOW_WORKDIR": "workdir"}
    for var, key in overrides.items():
        if env.get(var):
            data[key] = env[var]
    for var, (section, key) in {
        "HETFLOW_SLURM_PARTITION": ("slurm", "partition"),
        "HETFLOW_SLURM_ACCOUNT": ("slurm", "account"),
        "HETFLOW_RAY_ADDRESS": ("ray", "address"),
        "HETFLOW_KUBE_NAMESPACE": ("kubernetes", "namespace"),
        "HETFLOW_KUBE_CONTEXT": ("kubernetes", "context"),
    }.items():
        if env.get(var):
            data[section] = {**data[section], key: env[var]}


def _read(path: Path) -> tuple[dict[str, Any], Mapping[tuple[str | int, ...], int]]:
    """The settings file's mapping and the line of each key; unknown keys refused."""
    # the reader every YAML file goes through: size, UTF-8, NUL, depth and alias limits
    text = read_yaml_text(path, "a YAML settings file")
    loaded, lines, problems = compose_yaml(text, str(path)) if text.strip() else ({}, {}, [])
    if problems:
        raise SpecError(problems)
    loaded = loaded or {}
    if not isinstance(loaded, dict):
        raise UsageError(f"{path}: settings are a mapping with keys {', '.join(sorted(_FILE_KEYS))}")
    unknown = sorted(set(loaded) - _FILE_KEYS, key=str)
    if unknown:
        raise UsageError(
            f"{path}:{line_of(lines, (unknown[0],))}: unknown key(s) {', '.join(map(str, unknown))};"
            f" allowed: {', '.join(sorted(_FILE_KEYS))}"
        )
    return dict(loaded), lines


@dataclass(frozen=True)
class RunnerConfig:
    """How an executor paces itself: its poll interval and retry backoff, from the environment
    (``HETFLOW_POLL_INTERVAL``, ``HETFLOW_RETRY_BACKOFF``, ``HETFLOW_GROW_EVERY``; checked before
    any command starts)."""

    poll_interval: float = 0.25
    retry_backoff: float = 2.0  # seconds before the first retry; doubles each time
    max_backoff: float = 300.0
    grow_every: float = 30.0  # seconds an elastic gang runs before it may grow (``run.growth``)

    @classmethod
    def from_env(cls) -> RunnerConfig:
        return cls(
            poll_interval=float(os.environ.get("HETFLOW_POLL_INTERVAL", "0.25")),
            retry_backoff=float(os.environ.get("HETFLOW_RETRY_BACKOFF", "2")),
            grow_every=float(os.environ.get("HETFLOW_GROW_EVERY", "30")),
        )
