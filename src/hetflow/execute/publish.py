"""Publishing a step's outputs when it succeeds (like Nextflow's ``publishDir``): copied or
hard-linked into a host directory, or uploaded under an S3 prefix.

Nothing is replaced silently: with ``mode: copy`` or ``link`` a different file already at
the target makes the step fail with a message naming it (an identical one is left as it
is); ``mode: overwrite`` replaces it.  A copy is written beside the target and renamed
into place, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from hetflow.errors import HetflowError
from hetflow.execute.data import ObjectStore, s3_filesystem, sha256_file
from hetflow.spec import Publish, Step


class PublishError(HetflowError):
    """A result could not be published (the step fails with this message)."""


def publish_step(
    step: Step,
    out_dir: Path,
    uid: int,
    gid: int,
    s3: Callable[[str | None], ObjectStore] = s3_filesystem,
) -> list[str]:
    """Publish every ``publish`` entry of ``step`` from its accepted outputs in ``out_dir``;
    returns the targets written (``file -> target`` lines for the run's events)."""
    done: list[str] = []
    for pub in step.publish:
        names = pub.outputs or step.outputs
        files = _files(out_dir, names)
        if pub.to.startswith("s3://"):
            done += _to_s3(pub, files, s3(pub.endpoint))
        else:
            done += _to_dir(pub, files, uid, gid)
    return done


def _files(out_dir: Path, names: Sequence[str]) -> list[tuple[str, Path]]:
    """(path relative to the step's /out, host file) for each file of the named outputs."""
    files = []
    for name in names:
        src = out_dir / name
        if src.is_dir():
            files += [(p.relative_to(out_dir).as_posix(), p) for p in sorted(src.rglob("*")) if p.is_file()]
        elif src.is_file():
            files.append((name, src))
        else:
            raise PublishError(f"output {name!r} is not in {out_dir}; it cannot be published")
    return files


def _to_dir(pub: Publish, files: list[tuple[str, Path]], uid: int, gid: int) -> list[str]:
    root = Path(pub.to)
    done = []
    for rel, src in files:
        target = root / rel
        if target.exists() or target.is_symlink():
            if target.is_file() and not target.is_symlink() and sha256_file(target) == sha256_file(src):
                done.append(f"{rel} -> {target} (already there, identical)")
                continue
            if pub.mode != "overwrite":
                raise PublishError(
                    f"publish {rel!r}: {target} already exists and differs; remove it, publish elsewhere, "
                    "or set 'mode: overwrite'"
                )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if pub.mode == "link":
                _link(src, target)
            else:
                _copy(src, target, uid, gid)
        except OSError as exc:
            raise PublishError(f"publish {rel!r} to {target}: {exc.strerror or exc}") from None
        done.append(f"{rel} -> {target}")
    return done


def _link(src: Path, target: Path) -> None:
    """A hard link (the outputs stay in the run's directory); a copy across file systems."""
    tmp = target.with_name(f".{target.name}.hetflow-tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, target)


def _copy(src: Path, target: Path, uid: int, gid: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        if os.geteuid() == 0:
            os.chown(tmp, uid, gid)  # the submitter owns what is published for them
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _same_object(fs: ObjectStore, key: str, src: Path) -> bool:
    """The object's ETag is the MD5 of its bytes when it was uploaded in one part."""
    etag = str(fs.info(key).get("ETag", "")).strip('"')
    return "-" not in etag and etag == hashlib.md5(src.read_bytes(), usedforsecurity=False).hexdigest()


def _to_s3(pub: Publish, files: list[tuple[str, Path]], fs: ObjectStore) -> list[str]:
    prefix = pub.to.removeprefix("s3://").rstrip("/")
    done = []
    for rel, src in files:
        key = f"{prefix}/{rel}"
        try:
            if fs.exists(key) and _same_object(fs, key, src):
                done.append(f"{rel} -> s3://{key} (already there, identical)")
                continue
            if fs.exists(key) and pub.mode != "overwrite":
                raise PublishError(
                    f"publish {rel!r}: s3://{key} already exists; publish under another prefix or set 'mode: overwrite'"
                )
            fs.put_file(str(src), key)
        except PublishError:
            raise
        except Exception as exc:
            raise PublishError(f"publish {rel!r} to s3://{key}: {str(exc).splitlines()[0][:300]}") from None
        done.append(f"{rel} -> s3://{key}")
    return done
