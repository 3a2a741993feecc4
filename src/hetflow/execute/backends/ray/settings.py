"""Ray settings: where the cluster is (or a local one to start), read from the ``ray:`` section."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hetflow.errors import UsageError
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.devices.migtable import MigInstance, parse_mig_devices

NAMESPACE = "hetflow"


@dataclass(frozen=True)
class RaySettings:
    """``address``: "auto", "HOST:PORT" (the head's GCS) or "ray://HOST:10001" (Ray
    Client); None: RAY_ADDRESS, else a local cluster when ``start_local``, else "auto".
    ``start_local`` starts Ray inside this process (``num_cpus``, ``num_gpus``,
    ``resources`` as for ``ray.init``); it ends with the process, so its jobs cannot be
    adopted after a crash: run ``ray start --head`` for that."""

    address: str | None = None
    namespace: str = NAMESPACE
    start_local: bool = False
    num_cpus: int | None = None
    num_gpus: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    device_dir: str = "/dev"
    # node -> its MIG instances, so a MIG step's container gets its instance by UUID
    # (``execute.devices.migtable``; Ray itself only counts a node's mig-<profile>)
    mig_devices: Mapping[str, tuple[MigInstance, ...]] = field(default_factory=dict)
    stop_timeout: int = 10  # seconds between SIGTERM and SIGKILL on cancel (podman stop -t)
    idle_timeout: float = 300.0  # a run's actor ends after this long with no job to answer for

    @classmethod
    def from_backend(cls, settings: RunSettings) -> RaySettings:
        return cls.from_mapping(settings.section("ray"), engine=settings.engine)

    @classmethod
    def from_mapping(cls, m: Mapping[str, str], *, engine: str = "podman") -> RaySettings:
        """From the ``ray:`` section of hetflow's settings, whose values are strings (as
        config files and HETFLOW_* variables give them; ``resources`` is a YAML or JSON
        mapping).  ``engine``: the container engine on the nodes; podman only, since a
        foreground ``docker run --rm`` would take the step's log with it."""
        if Path(engine).name != "podman":
            raise UsageError(f"the Ray backend runs steps with podman on each node; engine {engine!r} is not supported")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(m) - known)
        if unknown:
            raise UsageError(f"ray settings: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        kw: dict[str, Any] = {}
        for key, raw in m.items():
            if key == "mig_devices":  # a mapping in a config file, YAML text in a variable
                kw[key] = parse_mig_devices(raw, "ray.mig_devices")
                continue
            text = str(raw).strip()
            try:
                kw[key] = _setting(key, text)
            except (ValueError, AttributeError, yaml.YAMLError) as exc:
                raise UsageError(
                    f"ray settings: {key}={raw!r} is not valid ({exc}); "
                    'e.g. num_cpus: 8, resources: {"accelerator_type:A100": 4}'
                ) from None
        return cls(**kw)


def _setting(key: str, text: str) -> Any:
    if key == "start_local":
        return text.lower() in ("1", "true", "yes", "on")
    if key in ("num_cpus", "num_gpus", "stop_timeout"):
        return int(text)
    if key == "idle_timeout":
        return float(text)
    if key == "resources":
        return {str(k): float(v) for k, v in (yaml.safe_load(text) or {}).items()}
    if key == "address":
        return text or None
    return text
