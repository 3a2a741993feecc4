"""Cluster-wide settings: the backend and how to reach its engine, the shared work
directory, the container engine on the nodes, the cluster file to plan with.

Read from ``--config FILE`` or ``$HETFLOW_HOME/config.yaml`` (absent: defaults), then
overridden by the environment, as the engines' own tools do (SLURM_CONF, RAY_ADDRESS):

    HETFLOW_BACKEND          a backend's name (``backends.registry``: local, the default)
    HETFLOW_CLUSTER          the cluster file (node types) to plan with
    HETFLOW_WORKDIR          the shared work directory for runs (multi-node backends)
    HETFLOW_SLURM_PARTITION, HETFLOW_SLURM_ACCOUNT, HETFLOW_RAY_ADDRESS (ray://HOST:PORT,
    HOST:PORT or auto), HETFLOW_KUBE_NAMESPACE, HETFLOW_KUBE_CONTEXT: a key of a backend's
                             section, as its plugin declares (``BackendPlugin.env``)

Each registered backend with settings of its own reads the section of its name; a key its
settings class has no field for is refused, naming the section.  The sections and variables
are the registry's: this module names no backend.

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
from hetflow.execute.backends import registry
from hetflow.execute.backends.plugin import LEASES, BackendPlugin
from hetflow.execute.layers import Layers, check_section, choose_profiles
from hetflow.plan import Steer
from hetflow.spec import Origin, compose_yaml, line_of, read_yaml_text

_COMMON = {"backend", "cluster", "workdir", "engine", "cache", "notify"}  # beside each backend's section
_SECTIONS = {"params", "resources"}  # what a file's top level and a profile give a run, beside _keys()
# stored with a run: the command line's too, never a config file's; the resource overrides
# (a run read back by its executor or a resume applies them again) and the profiles chosen
_RUN_ONLY = {"variants", "prefer", "resources", "profiles"}


def _backend_sections() -> tuple[str, ...]:
    return tuple(registry.sections())


def _keys() -> set[str]:
    """What a file's top level and a profile set: the common keys and every backend's section."""
    return _COMMON | set(_backend_sections())


def _file_keys() -> set[str]:
    return _keys() | _SECTIONS | {"profiles"}


@dataclass(frozen=True)
class Settings:
    backend: str = registry.DEFAULT_BACKEND
    cluster: str | None = None
    workdir: str | None = None
    engine: str = "podman"
    # each backend's section (its name -> its own keys, YAML values or the environment's strings)
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
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
    def plugin(self) -> BackendPlugin:
        """The backend's plugin (``backends.registry``): how it dispatches, what it reads."""
        return registry.by_name(self.backend)

    @property
    def leases_here(self) -> bool:
        """Its steps run on this machine, placed by its free capacity and GPU leases."""
        return self.plugin.dispatch == LEASES

    def section(self, name: str) -> Mapping[str, Any]:
        """The backend ``name``'s own keys (``backends.plugin.RunSettings``)."""
        return self.sections.get(name, {})

    @property
    def steer(self) -> Steer:
        """The command line's say over variant choice (``plan.onemachine.steer``)."""
        return Steer(dict(self.variants), self.prefer)

    def __post_init__(self) -> None:
        # `notify:` is one URL or a list (YAML, JSON): a tuple, so a run's settings read back equal
        if not isinstance(self.notify, str):
            object.__setattr__(self, "notify", tuple(self.notify))

    def to_json(self) -> str:
        """The settings stored with a run: each backend's section at the top level, by its name."""
        data = {k: v for k, v in asdict(self).items() if k in _COMMON | _RUN_ONLY}
        data.update({name: dict(self.section(name)) for name in _backend_sections()})
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        loaded = json.loads(text or "{}")
        data = {k: v for k, v in loaded.items() if k in _COMMON | _RUN_ONLY}
        if "profiles" in data:
            data["profiles"] = tuple(data["profiles"])
        sections = {k: v for k, v in loaded.items() if k in _backend_sections() and v}
        if sections:
            data["sections"] = sections
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
    sections = _sections(data, lines, path, chosen)
    _environment(data, sections, env)
    for _, body in chosen:  # a profile is chosen on this command line: it wins over the environment
        for key, value in body.items():
            if key in sections:
                sections[key] = {**sections[key], **{str(k): v for k, v in (value or {}).items()}}
            elif key in _COMMON:
                data[key] = value
    if backend is not None:
        data["backend"] = backend
    if cluster is not None:
        data["cluster"] = str(cluster)
    chosen_backend = str(data.get("backend", registry.DEFAULT_BACKEND))
    plugin = registry.by_name(chosen_backend, where=f"--backend, HETFLOW_BACKEND, a profile or {path}")
    # a backend that lists its nodes (Kubernetes' API server) plans on them without a file
    if plugin.cluster_file and not data.get("cluster"):
        raise UsageError(
            f"the {chosen_backend} backend plans on a cluster file: give --cluster FILE (node types; see"
            f" examples/clusters), HETFLOW_CLUSTER, or 'cluster:' in {path}"
        )
    return Settings(
        **{k: v for k, v in data.items() if k in _COMMON},
        sections={k: v for k, v in sections.items() if v},
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
        unknown = sorted(set(body) - _keys() - _SECTIONS, key=str)
        if unknown:
            raise UsageError(
                f"{path}:{line_of(lines, (*loc, unknown[0]))}: profile {name!r}: unknown key(s)"
                f" {', '.join(map(str, unknown))}; a profile sets {', '.join(sorted(_keys() | _SECTIONS))}"
            )
        problem = check_section(body, lines, str(path), loc)
        if problem is not None:
            raise UsageError(problem)
        layers.add(body, lines, str(path), loc, f"profile {name!r}")
    return layers, chosen


def _sections(
    data: dict[str, Any],
    lines: Mapping[tuple[str | int, ...], int],
    path: Path,
    chosen: Sequence[tuple[str, dict[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """Each backend's section of the file (empty where absent), its profiles' checked too: a
    mapping, of keys its settings class has (``registry.section_keys``)."""
    parts = [((), "", data), *((("profiles", n), f"profile {n!r}: ", b) for n, b in chosen)]
    for key, plugin in registry.sections().items():
        for loc, where, part in parts:
            value = part.get(key, {})
            if not isinstance(value, dict):
                raise UsageError(f"{path}: {where}{key!r} must be a mapping")
            unknown = sorted(set(map(str, value)) - set(registry.section_keys(plugin))) if value else []
            if unknown:
                raise UsageError(
                    f"{path}:{line_of(lines, (*loc, key, unknown[0]))}: {where}the {key!r} section has unknown"
                    f" key(s) {', '.join(unknown)}; the {plugin.name} backend takes"
                    f" {', '.join(registry.section_keys(plugin))}"
                )
    return {key: {str(k): v for k, v in (data.get(key) or {}).items()} for key in registry.sections()}


def _environment(data: dict[str, Any], sections: dict[str, dict[str, Any]], env: Mapping[str, str]) -> None:
    """HETFLOW_BACKEND and the others over the file's values, in place; each backend's
    variables (``BackendPlugin.env``) into its section."""
    overrides = {"HETFLOW_BACKEND": "backend", "HETFLOW_CLUSTER": "cluster", "HETFLOW_WORKDIR": "workdir"}
    for var, key in overrides.items():
        if env.get(var):
            data[key] = env[var]
    for section, plugin in registry.sections().items():
        for var, key in plugin.env.items():
            if env.get(var):
                sections[section] = {**sections[section], key: env[var]}


def _read(path: Path) -> tuple[dict[str, Any], Mapping[tuple[str | int, ...], int]]:
    """The settings file's mapping and the line of each key; unknown keys refused."""
    # the reader every YAML file goes through: size, UTF-8, NUL, depth and alias limits
    text = read_yaml_text(path, "a YAML settings file")
    loaded, lines, problems = compose_yaml(text, str(path)) if text.strip() else ({}, {}, [])
    if problems:
        raise SpecError(problems)
    loaded = loaded or {}
    if not isinstance(loaded, dict):
        raise UsageError(f"{path}: settings are a mapping with keys {', '.join(sorted(_file_keys()))}")
    unknown = sorted(set(loaded) - _file_keys(), key=str)
    if unknown:
        raise UsageError(
            f"{path}:{line_of(lines, (unknown[0],))}: unknown key(s) {', '.join(map(str, unknown))};"
            f" allowed: {', '.join(sorted(_file_keys()))}"
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
