"""A cluster node's MIG instances, for the cluster backends to give a MIG step's container
exactly its instance, as ``gpu._nvidia_mig`` gives it on this machine: the parent GPU's
``nvidiaN``, only the instance's ``nvidia-caps/nvidia-capM`` nodes (its GPU and compute
instance), and ``NVIDIA_VISIBLE_DEVICES`` = ``CUDA_VISIBLE_DEVICES`` = its ``MIG-...`` UUID.

Neither engine says which instance it gave in those terms: Slurm hands out a gres index
(``SLURM_JOB_GPUS``; its gres.conf record is ``MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/
nvidia-cap21,...``, gres.conf(5)), Ray only counts a ``mig-<profile>`` resource.  The node's
table (``slurm.mig_devices`` / ``ray.mig_devices``, as ``hetflow nodes`` reads them from NVML
or ``HETFLOW_FAKE_GPUS`` makes them) maps that to the UUID and the device files::

    mig_devices:
      gpu-node-1:
        - {uuid: MIG-..., gpu_uuid: GPU-..., profile: 1g.10gb,
           files: [/dev/nvidia0, /dev/nvidia-caps/nvidia-cap21, /dev/nvidia-caps/nvidia-cap22]}

An entry's ``index`` is its gres index on the node (default: its place in the list)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from hetflow.errors import UsageError
from hetflow.inventory import Gpu


@dataclass(frozen=True)
class MigInstance:
    """One MIG instance of a cluster node."""

    uuid: str  # MIG-..., what NVIDIA_VISIBLE_DEVICES takes
    profile: str  # e.g. 1g.10gb (the Slurm gres type, the Ray mig-<profile> resource)
    files: tuple[str, ...]  # host paths: the parent GPU's nvidiaN, then the instance's nvidia-capM nodes
    gpu_uuid: str = ""  # the parent GPU's
    index: int = 0  # Slurm's gres index on the node

    def devices(self) -> tuple[tuple[str, str], ...]:
        """(host, inside) pairs: nvidiaN keeps its name (the driver matches by minor), a cap
        node goes under /dev/nvidia-caps, as ``gpu._nvidia_mig`` maps them."""
        return tuple(
            (
                f,
                f"/dev/nvidia-caps/{os.path.basename(f)}"
                if "nvidia-cap" in os.path.basename(f)
                else f"/dev/{os.path.basename(f)}",
            )
            for f in self.files
        )

    def env(self) -> dict[str, str]:
        """The variables the container gets, as on this machine (``gpu._nvidia_mig``)."""
        env = {
            "NVIDIA_VISIBLE_DEVICES": self.uuid,
            "CUDA_VISIBLE_DEVICES": self.uuid,
            "HETFLOW_MIG_UUID": self.uuid,
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        }
        if self.gpu_uuid:
            env["HETFLOW_GPU_UUIDS"] = self.gpu_uuid
        return env


def mig_instances(gpus: Sequence[Gpu], first_index: int = 0) -> tuple[MigInstance, ...]:
    """A node's MIG instances from its inventory (NVML, or fake GPUs), in GPU then instance
    order, gres indices counting from ``first_index``."""
    found = [(g, m) for g in gpus if g.vendor == "nvidia" for m in g.mig]
    return tuple(
        MigInstance(m.uuid, m.profile, (g.device_path, *m.cap_paths), g.uuid, first_index + i)
        for i, (g, m) in enumerate(found)
    )


def parse_mig_devices(raw: object, where: str) -> dict[str, tuple[MigInstance, ...]]:
    """The ``mig_devices`` setting (``where``: its name, for messages): node -> its instances."""
    if isinstance(raw, str):  # from an environment variable or a string-valued section: YAML or JSON
        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise UsageError(f"{where} is not valid YAML ({exc})") from None
    if raw in (None, "", {}):
        return {}
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where} must map node names to lists of MIG instances, not {type(raw).__name__}")
    out: dict[str, tuple[MigInstance, ...]] = {}
    for node, entries in raw.items():
        if not isinstance(entries, list | tuple):
            raise UsageError(f"{where}.{node} must be a list of {{uuid, profile, files}} entries")
        found = []
        for i, e in enumerate(entries):
            if isinstance(e, MigInstance):
                found.append(e)
                continue
            if not isinstance(e, Mapping) or not e.get("uuid") or not e.get("profile") or not e.get("files"):
                raise UsageError(
                    f"{where}.{node}[{i}] is {e!r}; give {{uuid: MIG-..., profile: 1g.10gb, "
                    "files: [/dev/nvidia0, /dev/nvidia-caps/nvidia-capN, ...]}"
                )
            files = e["files"]
            found.append(
                MigInstance(
                    uuid=str(e["uuid"]),
                    profile=str(e["profile"]),
                    files=tuple(str(f) for f in (files if isinstance(files, list | tuple) else str(files).split(","))),
                    gpu_uuid=str(e.get("gpu_uuid") or ""),
                    index=int(e.get("index", i)),
                )
            )
        out[str(node)] = tuple(found)
    return out
