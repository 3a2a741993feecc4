"""The device nodes and MIG instances of fake GPUs (``HETFLOW_FAKE_GPUS``; the GPUs: ``fakegpus``).

Every node is a real character device made with mknod, so ``--device`` works exactly
as on a GPU machine; no driver answers on any of them (opening one fails with ENXIO).

    NVIDIA   <dev>/nvidiaN 195:N, <dev>/nvidiactl 195:255 (devices.txt: 195 "Nvidia graphics")
    MIG      <dev>/nvidia-caps/nvidia-capM, NVIDIA_CAPS_MAJOR:M, one for the GPU instance's
             access and one for its compute instance's, M numbered as the driver numbers
             them in /proc/driver/nvidia-caps/mig-minors (gpuG/giI/access = 3 + 135G + 9I,
             gpuG/giI/ciC/access = that + 1 + C)
    AMD      <dev>/dri/renderD{128+k} 226:128+k, <dev>/dri/card{k} 226:k (devices.txt: 226
             "Direct Rendering Infrastructure"), plus <dev>/kfd, KFD_MAJOR:0
    Intel    its <dev>/dri/renderD{128+k} and card{k}, numbered with the AMD ones (one DRM
             namespace for all of a host's GPUs)

The real ``nvidia-caps`` and ``kfd`` majors are dynamic (the kernel hands them out at
module load; /proc/devices lists them): the fakes use 236 and 235, from the range
devices.txt leaves to dynamic assignment (234-254), so that a test can tell them apart.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from hetflow.errors import InventoryError
from hetflow.inventory.gpus.gpumodels import GpuModel
from hetflow.inventory.gpus.nvmlmig import mig_cap_minors
from hetflow.inventory.models import MigDevice

ENV_VAR = "HETFLOW_FAKE_GPUS"
NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
DRM_MAJOR = 226
DRM_RENDER_BASE = 128
KFD_MAJOR = 235
NVIDIA_CAPS_MAJOR = 236
MIG_SLICES = 7  # compute slices of a MIG-capable GPU
MIG_MEMORY_SLICES = 8  # memory slices (the 7g profile takes all 8)

# os.mknod's shape: (path, mode, device) -> None.
MknodFn = Callable[[Path, int, int], None]


def _is_device(path: Path, major: int, minor: int) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor)


def ensure_char_device(path: Path, major: int, minor: int, *, mknod: MknodFn = os.mknod) -> None:
    """Make ``path`` a character device ``major:minor``, keeping a correct one as it is.

    ``mknod`` is the seam tests use to play an unprivileged user.
    """
    if _is_device(path, major, minor):
        return
    if path.is_dir() and not path.is_symlink():
        raise InventoryError(f"{path} is a directory; remove it so a fake GPU node can go there")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # wrong numbers, a plain file or a stale link
    try:
        mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError as err:
        # EPERM: not root, or root in a user namespace (rootless podman), where the
        # kernel refuses device nodes whatever the capabilities say.
        raise InventoryError(
            f"fake GPUs need root (CAP_MKNOD) to create device node {path}: {err.strerror}; "
            f"run as root or unset {ENV_VAR}"
        ) from err
    except OSError as err:
        raise InventoryError(f"cannot create fake GPU node {path}: {err}") from err
    # mknod applies the umask; containers open these read-write, as with real nodes.
    os.chmod(path, 0o666)


def mig_memory_slices(profile: str, model: GpuModel) -> int:
    """Memory slices (of 8) a profile takes: its memory over the 7g profile's, in eighths
    (3g.40gb on an 80 GB GPU: 4)."""
    full = model.full_mig_profile
    gb = float(profile.split(".")[1].removesuffix("gb"))
    full_gb = float(full.split(".")[1].removesuffix("gb"))
    return max(1, round(gb * MIG_MEMORY_SLICES / full_gb))


def check_mig_layout(entry: str, key: str, model: GpuModel, profiles: tuple[str, ...]) -> None:
    """Raise ``InventoryError`` naming ``entry`` unless ``profiles`` is a layout one
    ``model`` GPU can hold: each a profile of the model, at most 7 compute slices and 8
    memory slices in all."""
    if not model.mig_profiles:
        capable = "a100, a100-80g, h100, h200"
        raise InventoryError(f"{ENV_VAR}: {entry!r}: {key} has no MIG; MIG needs one of {capable}")
    if not profiles:
        raise InventoryError(f"{ENV_VAR}: {entry!r}: mig= names no profile; write e.g. mig={model.mig_profiles[0]}")
    for profile in profiles:
        if profile not in model.mig_profiles:
            raise InventoryError(
                f"{ENV_VAR}: {entry!r}: {profile!r} is not a MIG profile of {key} ({model.product}); "
                f"use {', '.join(model.mig_profiles)}"
            )
    slices = sum(int(p.split("g.")[0]) for p in profiles)
    memory = sum(mig_memory_slices(p, model) for p in profiles)
    if slices > MIG_SLICES or memory > MIG_MEMORY_SLICES:
        raise InventoryError(
            f"{ENV_VAR}: {entry!r}: layout {'+'.join(profiles)} takes {slices} compute slices and {memory} "
            f"memory slices; a {key} has {MIG_SLICES} and {MIG_MEMORY_SLICES}: drop an instance"
        )


def fake_mig_uuid(gpu_uuid: str, index: int) -> str:
    """``MIG-fake-`` then 8-4-4-4-12 hex groups, stable per GPU and instance."""
    h = hashlib.sha256(f"{gpu_uuid}:mig:{index}".encode()).hexdigest()
    return f"MIG-fake-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def make_mig_devices(
    gpu_uuid: str, gpu_minor: int, model: GpuModel, profiles: tuple[str, ...], dev_dir: Path
) -> tuple[MigDevice, ...]:
    """One ``MigDevice`` per profile, in order, with its two cap device nodes made.
    GPU instance ids count from 1 in layout order and each has compute instance 0 (made
    up: the driver picks ids by placement)."""
    devices = []
    for index, profile in enumerate(profiles):
        gi, ci = index + 1, 0
        caps = []
        for minor in mig_cap_minors(gpu_minor, gi, ci):
            path = dev_dir / "nvidia-caps" / f"nvidia-cap{minor}"
            ensure_char_device(path, NVIDIA_CAPS_MAJOR, minor)
            caps.append(str(path))
        eighths = mig_memory_slices(profile, model)
        devices.append(
            MigDevice(
                index=index,
                uuid=fake_mig_uuid(gpu_uuid, index),
                profile=profile,
                slices=int(profile.split("g.")[0]),
                memory_bytes=model.memory_bytes * eighths // MIG_MEMORY_SLICES,
                gpu_instance=gi,
                compute_instance=ci,
                cap_paths=tuple(caps),
            )
        )
    return tuple(devices)


def make_dri_nodes(dev_dir: Path, k: int) -> tuple[str, str]:
    """The render node ``dri/renderD{128+k}`` and card ``dri/card{k}`` of the k-th DRM GPU."""
    render = dev_dir / "dri" / f"renderD{DRM_RENDER_BASE + k}"
    card = dev_dir / "dri" / f"card{k}"
    ensure_char_device(render, DRM_MAJOR, DRM_RENDER_BASE + k)
    ensure_char_device(card, DRM_MAJOR, k)
    return str(render), str(card)


def make_kfd(dev_dir: Path) -> str:
    """``<dev>/kfd``: the ROCm compute interface every AMD container needs."""
    path = dev_dir / "kfd"
    ensure_char_device(path, KFD_MAJOR, 0)
    return str(path)
