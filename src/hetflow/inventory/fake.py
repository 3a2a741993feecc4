"""Fake GPUs from configuration, for trying hetflow on a machine without GPUs.

``HETFLOW_FAKE_GPUS=a100:2,t4:1`` makes up three GPUs.  So that containers can be
started exactly as on a GPU machine (``--device`` needs a character device), each fake
GPU gets a real device node ``<dev_dir>/nvidiaN`` (major 195, like the NVIDIA driver's)
plus ``nvidiactl`` (195:255).  No driver answers on those nodes: opening one fails with
ENXIO, which is fine for steps that only check that a GPU was assigned.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from hetflow.errors import InventoryError
from hetflow.inventory.gpumodels import KNOWN_MODELS
from hetflow.inventory.models import Gpu

ENV_VAR = "HETFLOW_FAKE_GPUS"

# The NVIDIA driver's character-device numbers (devices.txt lists 195 as
# "Nvidia graphics devices"; minor 255 is nvidiactl).
NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255

# os.mknod's shape: (path, mode, device) -> None.
MknodFn = Callable[[Path, int, int], None]


# Minor 255 belongs to nvidiactl, so at most 255 GPUs fit in 195:0..254.
MAX_FAKE_GPUS = NVIDIACTL_MINOR


def _known() -> str:
    return ", ".join(sorted(KNOWN_MODELS))


def parse_fake_spec(text: str) -> list[tuple[str, int]]:
    """``"a100:2,t4:1"`` -> ``[("a100", 2), ("t4", 1)]``.

    A bare model means one GPU (``"t4"``); names are case-insensitive; empty entries
    (a trailing comma) are skipped.  Raises ``InventoryError`` naming the bad entry.
    """
    entries: list[tuple[str, int]] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, _, count_text = entry.partition(":")
        model = name.strip().lower()
        if model not in KNOWN_MODELS:
            raise InventoryError(f"{ENV_VAR}: {entry!r} names no known model; use one of {_known()}")
        count_text = count_text.strip() or "1"
        if not count_text.isdigit() or int(count_text) < 1:
            raise InventoryError(
                f"{ENV_VAR}: {entry!r} has a bad count {count_text!r}; "
                f"write a whole number of at least 1, e.g. '{model}:2'"
            )
        entries.append((model, int(count_text)))
    total = sum(count for _, count in entries)
    if total > MAX_FAKE_GPUS:
        raise InventoryError(
            f"{ENV_VAR}: {text!r} asks for {total} GPUs; at most {MAX_FAKE_GPUS} fit "
            f"in device minors 0-{MAX_FAKE_GPUS - 1}"
        )
    return entries


def fake_uuid(model: str, index: int) -> str:
    """A stable UUID: ``GPU-fake-`` then a real UUID's 8-4-4-4-12 hex groups.

    Real ones read ``GPU-8a1c5a3e-0f53-...``; the ``fake`` word keeps these from ever
    being mistaken for one, and hashing model and index keeps them stable across runs.
    """
    h = hashlib.sha256(f"{model}:{index}".encode()).hexdigest()
    return f"GPU-fake-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _is_device(path: Path, minor: int) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(NVIDIA_MAJOR, minor)


def ensure_device_node(path: Path, minor: int, *, mknod: MknodFn = os.mknod) -> None:
    """Make ``path`` a character device 195:``minor``, keeping a correct one as it is.

    ``mknod`` is the seam tests use to play an unprivileged user.
    """
    if _is_device(path, minor):
        return
    if path.is_dir() and not path.is_symlink():
        raise InventoryError(f"{path} is a directory; remove it so a fake GPU node can go there")
    path.unlink(missing_ok=True)  # wrong numbers, a plain file or a stale link
    try:
        mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
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


def make_fake_gpus(spec: str, dev_dir: Path) -> tuple[list[Gpu], list[str]]:
    """Fake GPUs for ``spec`` with device nodes under ``dev_dir``.

    Returns the GPUs (index and minor in spec order) and the control device paths.
    Safe to call again: nodes that already have the right numbers are kept.
    """
    entries = parse_fake_spec(spec)
    dev_dir.mkdir(parents=True, exist_ok=True)
    gpus: list[Gpu] = []
    for name, count in entries:
        model = KNOWN_MODELS[name]
        for _ in range(count):
            index = len(gpus)
            path = dev_dir / f"nvidia{index}"
            ensure_device_node(path, index)
            gpus.append(
                Gpu(
                    index=index,
                    uuid=fake_uuid(name, index),
                    model=model.product,
                    memory_bytes=model.memory_bytes,
                    compute_capability=model.compute_capability,
                    driver_version="fake",
                    device_path=str(path),
                    minor=index,
                    fake=True,
                )
            )
    control = dev_dir / "nvidiactl"
    if gpus:
        ensure_device_node(control, NVIDIACTL_MINOR)
    return gpus, [str(control)] if gpus else []
