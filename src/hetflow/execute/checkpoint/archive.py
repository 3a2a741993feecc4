"""Ready a checkpoint image to be restored as another container: a new attempt's name, ID,
labels, cgroup and ``/out`` folder, and an empty log.

``podman container restore --import`` creates the container that ``config.dump`` and
``spec.dump`` in the image describe.  Restored under a new name (``--name``), podman 4.3 keeps
paths of the old container's ID in the OCI spec; so hetflow gives the image the new attempt's
identity itself: a fresh ID, its name and labels, the attempt's cgroup parent and staging
folder in place of the old ones.  The two small files are appended to the uncompressed tar
(a later member replaces an earlier one of the same name when podman extracts it), so a
2 GiB image is not copied to be restored.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
import shutil
import tarfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.checkpoint.images import Restore

# podman's autoremove flag in both dumps, as podman and json.dumps write it, turned off: a step
# started with ``--rm`` (the Slurm and Ray paths) and restored, that ended before ``podman wait``
# looked, would have removed itself and its exit code with it; they remove it after the wait
KEEP_EXITED = {'"io.podman.annotations.autoremove": "TRUE"': '"io.podman.annotations.autoremove": "FALSE"'}


def retarget(image: Path, *, name: str, labels: Mapping[str, str], replace: Mapping[str, str]) -> str:
    """Give ``image`` a new container ID and ``name``, ``labels`` over its own, and each
    ``replace`` key (an old path) changed to its value in both dumps; returns the new ID."""
    try:
        with tarfile.open(image, "r:") as tar:
            config = json.loads(_member(tar, "config.dump"))
            spec = _member(tar, "spec.dump").decode()
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise EngineError(f"checkpoint image {image} cannot be read: {exc}") from None
    old_id = str(config.get("id", ""))
    new_id = secrets.token_hex(32)
    swap = _swapper({**({old_id: new_id} if old_id else {}), **replace})
    # the old paths and ID are swapped in what the image holds, in one pass each: a new
    # value (or the new ID, name and labels set after) is never searched for an old one
    try:
        config, spec = json.loads(swap(json.dumps(config))), swap(spec)
    except ValueError as exc:  # a path that JSON escapes (a quote, a backslash) in a pair
        raise EngineError(f"checkpoint image {image} cannot be retargeted: {exc}") from None
    config.update(id=new_id, name=name, labels={**(config.get("labels") or {}), **labels})
    text = json.dumps(config)
    with tarfile.open(image, "a:") as tar:
        # an image of a container that was itself restored holds that container's log
        # (ctr.log, podman's own path): the new attempt's log starts empty, not with its lines
        for member, data in (("config.dump", text.encode()), ("spec.dump", spec.encode()), ("ctr.log", b"")):
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
    return new_id


def _swapper(pairs: Mapping[str, str]) -> Callable[[str], str]:
    """Replace every key of ``pairs`` by its value at once (the longest key where two start
    at the same place), so a value that holds another key is left as it is."""
    keys = sorted((k for k in pairs if k), key=len, reverse=True)
    if not keys:
        return lambda text: text
    found = re.compile("|".join(re.escape(k) for k in keys))
    return lambda text: found.sub(lambda m: pairs[m.group(0)], text)


def ready_for(
    r: Restore,
    *,
    name: str,
    labels: Mapping[str, str],
    staging: str | None,
    cgroup_parent: str | None = None,
    replace: Mapping[str, str] | None = None,
) -> None:
    """Give checkpoint ``r``'s image the identity of the attempt it is restored as (every
    backend's restore): ``retarget`` to ``name`` and ``labels``, its ``/out`` moved from the
    folder the image mounts now (``staging_in``: an image restored before mounts that attempt's,
    not the dumped one's) to ``staging``, its cgroup parent to ``cgroup_parent`` where one is
    given, and ``replace``'s own pairs."""
    image = Path(r.image)
    was = staging_in(image) or r.staging_was
    swap = {was: staging} if staging and staging != was else {}
    old_parent = config_value(image, "cgroupParent")
    if cgroup_parent and isinstance(old_parent, str) and old_parent:
        swap[old_parent] = cgroup_parent
    retarget(image, name=name, labels=labels, replace={**swap, **(replace or {})})


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    """The last member called ``name`` (an image retargeted before holds several)."""
    found = [m for m in tar.getmembers() if m.name == name]
    if not found:
        raise KeyError(f"no {name}")
    f = tar.extractfile(found[-1])
    if f is None:
        raise KeyError(f"{name} is not a file")
    return f.read()


def config_value(image: Path, key: str) -> object:
    """One field of the image's ``config.dump`` (None when it cannot be read)."""
    try:
        with tarfile.open(image, "r:") as tar:
            return json.loads(_member(tar, "config.dump")).get(key)
    except (OSError, tarfile.TarError, KeyError, ValueError):
        return None


def staging_in(image: Path) -> str | None:
    """The ``/out`` folder the image's container mounts now: the dumped attempt's until the
    image is restored once, then the attempt it was retargeted to last (which a second restore
    of the same image must replace, not the first one's)."""
    oci = config_value(image, "spec")
    mounts = oci.get("mounts") if isinstance(oci, dict) else None
    for m in mounts if isinstance(mounts, list) else ():
        if isinstance(m, dict) and m.get("destination") == "/out" and isinstance(m.get("source"), str):
            return str(m["source"])
    return None


def link_log(podman_log: str, log: Path) -> None:
    """Make podman's own log of a restored container (``podman inspect``'s
    ``HostConfig.LogConfig.Path``: podman does not keep the path it was created with) the
    attempt's log: a hard link, which outlives the container's removal; a symlink where the
    two are on different file systems."""
    if not podman_log or podman_log == str(log):
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    try:
        os.link(podman_log, log)
    except OSError:
        with contextlib.suppress(OSError):
            log.symlink_to(podman_log)


def empty_out(folder: Path) -> None:
    """Remove what an attempt's ``/out`` folder holds, keeping the folder (its mount's source):
    a restore that failed leaves it as a start from zero finds a new one, without the
    checkpoint's copy of the restored process's outputs (issue 37)."""
    for p in folder.iterdir() if folder.is_dir() else ():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
