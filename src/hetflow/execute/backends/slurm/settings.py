"""Where and how the Slurm backend submits: ``SlurmSettings``, from the config file's
``slurm:`` section (YAML values or strings)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.errors import UsageError
from hetflow.execute.backends.common import flag, pairs, text
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.devices.migtable import MigInstance, parse_mig_devices
from hetflow.inventory import KNOWN_MODELS

# GPU product names (what NVML reports, what a cluster file's gpu_model says) -> gres types,
# as the fake models name them; a cluster's own names go in SlurmSettings.gres_types.
DEFAULT_GRES_TYPES: Mapping[str, str] = {
    # AMD and Intel data-centre GPUs, by the product names amdsmi / the Intel driver report
    # (AMD's gres types are what sites name them: gpu:mi250x, gpu:mi300x; Intel: gpu:max1550)
    "AMD Instinct MI250X": "mi250x",
    "AMD Instinct MI250": "mi250",
    "AMD Instinct MI210": "mi210",
    "AMD Instinct MI300X": "mi300x",
    "AMD Instinct MI300A": "mi300a",
    "Intel Data Center GPU Max 1550": "max1550",
    "Intel Data Center GPU Max 1100": "max1100",
    "Intel Data Center GPU Flex 170": "flex170",
    **{m.product: key for key, m in KNOWN_MODELS.items()},
}
SHARE_GRES = ("shard", "mps")


@dataclass(frozen=True)
class SlurmSettings:
    """Where and how to submit.  ``from_backend`` reads the run's Settings (config file, environment, flags)."""

    partition: str | None = None
    account: str | None = None
    # GPU product name -> gres type, over DEFAULT_GRES_TYPES; a model mapped to "" asks --gpus=N.
    gres_types: Mapping[str, str] = field(default_factory=dict)
    # The GPU device nodes on the nodes: /dev; "{node}" is replaced by the node's name
    # (the local test cluster keeps each fake node's devices in its own folder).
    device_dir: str = "/dev"
    # node -> its GPU device files in gres.conf's File= order, where that order is not the
    # device minors' (the default: the nvidiaN files of device_dir, sorted by N).
    gres_files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # node -> its MIG instances (UUID and device files per gres index), so a MIG job's
    # container gets its instance as on this machine (``execute.devices.migtable``)
    mig_devices: Mapping[str, tuple[MigInstance, ...]] = field(default_factory=dict)
    workdir: str | None = None  # shared by every node; default $HETFLOW_HOME/slurm
    bin_dir: str | None = None  # where sbatch, squeue, ... are; default PATH
    slurm_conf: str | None = None  # SLURM_CONF for the client commands
    extra_args: tuple[str, ...] = ()  # more sbatch options, e.g. ("--time=60", "--qos=short")
    use_features: bool = False  # --constraint=<node class> (node classes are Slurm features)
    podman: str = "podman"  # the engine on the nodes
    containers_conf: str | None = None  # on the nodes; default a copy of hetflow's in workdir
    stop_timeout: int = 10  # podman stop -t on scancel; keep it under the cluster's KillWait
    # The folder of the CRIU that podman uses on the nodes for checkpoints (``checkpoint:``);
    # default: where this machine's is (``execute.checkpoint.find_criu``), on a shared install.
    criu_dir: str | None = None
    # A share of a GPU where the plan does not say how the node shares: gres/shard
    # (time-slicing) or gres/mps; and the shards per GPU (gres.conf Name=shard Count=).
    share_gres: str = "shard"
    shards_per_gpu: int = 4

    @classmethod
    def from_backend(cls, settings: RunSettings) -> SlurmSettings:
        return cls.from_mapping(settings.section("slurm"), engine=settings.engine, workdir=settings.workdir)

    @classmethod
    def from_mapping(
        cls, m: Mapping[str, object], *, engine: str = "podman", workdir: str | None = None
    ) -> SlurmSettings:
        """The config file's ``slurm:`` section, as YAML values or as strings::

            slurm: {partition: gpu, account: ml, gres_types: {"Tesla T4": t4},   # or "Tesla T4=t4,..."
                    gres_files: {node1: [/dev/nvidia2, /dev/nvidia3]},          # or "node1=/dev/a:/dev/b,..."
                    extra_args: "--time=60", use_features: true, device_dir: /dev, slurm_conf: ...,
                    bin_dir: ..., podman: podman, containers_conf: ..., stop_timeout: 10, workdir: ...,
                    criu_dir: /opt/criu/sbin,
                    share_gres: shard, shards_per_gpu: 4,
                    mig_devices: {node1: [{uuid: MIG-..., profile: 1g.10gb, files: [/dev/nvidia0, ...]}]}}

        Job files go to ``slurm.workdir``, else to the shared ``workdir``'s ``slurm`` folder."""
        raw_files = m.get("gres_files")
        if isinstance(raw_files, Mapping):
            files = {
                str(k): tuple(str(f) for f in (v if isinstance(v, list | tuple) else [v])) for k, v in raw_files.items()
            }
        else:
            files = {k: tuple(f for f in v.split(":") if f) for k, v in pairs(raw_files).items()}
        extra = m.get("extra_args")
        shared = text(m, "workdir") or (str(Path(workdir) / "slurm") if workdir else None)
        return cls(
            partition=text(m, "partition"),
            account=text(m, "account"),
            gres_types=pairs(m.get("gres_types")),
            device_dir=text(m, "device_dir") or "/dev",
            gres_files=files,
            mig_devices=parse_mig_devices(m.get("mig_devices"), "slurm.mig_devices"),
            workdir=shared,
            bin_dir=text(m, "bin_dir"),
            slurm_conf=text(m, "slurm_conf"),
            extra_args=tuple(str(a) for a in extra)
            if isinstance(extra, list | tuple)
            else tuple(shlex.split(str(extra or ""))),
            use_features=flag(m.get("use_features", "")),
            # the job script is podman's (k8s-file logs, --hooks-dir, stop --ignore)
            podman=text(m, "podman") or (engine if Path(engine).name == "podman" else "podman"),
            containers_conf=text(m, "containers_conf"),
            stop_timeout=int(text(m, "stop_timeout") or 10),
            criu_dir=text(m, "criu_dir"),
            share_gres=_share_gres(text(m, "share_gres") or "shard"),
            shards_per_gpu=_positive(text(m, "shards_per_gpu") or "4", "slurm.shards_per_gpu"),
        )


def _share_gres(value: str) -> str:
    if value not in SHARE_GRES:
        raise UsageError(f"slurm.share_gres is {value!r}; give shard (time-slicing) or mps")
    return value


def _positive(value: str, name: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"{name} is {value!r}; give a whole number of 1 or more (gres.conf Count= per GPU)")
    return n


def gres_type(model: str | None, overrides: Mapping[str, str]) -> str | None:
    """The gres type for a GPU model, or None (then ``--gpus=N``: any GPU)."""
    if not model:
        return None
    for table in (overrides, DEFAULT_GRES_TYPES):
        for product, kind in table.items():
            if product.lower() == model.lower():
                return kind or None
    return None
