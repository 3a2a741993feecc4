"""Publishing a step's outputs when it succeeds (like Nextflow's ``publishDir``): copied or
hard-linked into a host directory, or uploaded under an S3 prefix.

What may be replaced (``decide``, one rule for host folders and S3):
- nothing there: written; the same bytes there: left as they are;
- ``mode: overwrite``: replaced, whatever is there;
- a file hetflow published there itself, for the same workflow name, whose content is still
  what it recorded (sha256; an S3 object's ETag): replaced.  A rerun after a change
  replaces its own earlier result, as Nextflow's publishDir overwrites by default;
- anything else (a file hetflow did not publish, one published by another workflow, one
  changed since it was published): refused, the step fails with a message naming the file,
  why, and what to change.

Each publish (``state.PublishRecord``) is recorded in the state store.  A host file is staged
beside its target (fsynced), then, holding an flock on ``.hetflow-publish.lock`` in the
target's folder, checked, renamed into place and recorded: two runs publishing to one folder at
once are serialised, so the second one sees the first one's file and its record, and the rule
alone decides (never two successes with one file silently lost).  The lock lives in the
target's folder, not under HETFLOW_HOME, so that runs with different HETFLOW_HOMEs (or on other
machines sharing the folder: Linux maps flock to POSIX locks on NFS) are serialised too; they
do not share records, so each refuses the other's file.  S3 has no such lock: publishers
sharing one HETFLOW_HOME are serialised by a lock file under it, and the upload is a
conditional write (S3's If-None-Match: * for a new key, If-Match: the ETag checked for a
replacement, both honoured by AWS S3 since 2024 and by moto), so an object written by anyone
else between the check and the upload makes the step fail, never vanish.  (A file of 100 MiB
or more is uploaded in parts; s3fs makes only the new-key case conditional there.)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from hetflow.errors import HetflowError
from hetflow.execute.data.inputs import ObjectStore, s3_filesystem, sha256_file
from hetflow.spec import Publish, Step
from hetflow.state import PublishRecord

LOCK_NAME = ".hetflow-publish.lock"
SINGLE_PUT = 100 * 2**20  # s3fs uploads a file under 2 x its 50 MiB chunk in one PutObject (If-Match goes there)
OVERWRITE_HINT = "remove it, publish elsewhere, or set 'mode: overwrite'"


class PublishError(HetflowError):
    """A result could not be published (the step fails with this message)."""


class Ledger(Protocol):
    """Where publishes are recorded (``state.Store``)."""

    path: Path

    def published(self, target: str) -> PublishRecord | None: ...

    def record_published(self, r: PublishRecord) -> None: ...


@dataclass(frozen=True)
class By:
    """Who publishes: the run, its workflow's name and the step."""

    run_id: str
    workflow: str
    step: str


# --- the rule -----------------------------------------------------------------------------

Action = Literal["write", "keep", "replace", "refuse"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    why: str  # for "replace" and "refuse": whose file it is, or why it may not be replaced


def decide(
    *,
    mode: str,
    present: bool,
    regular: bool,
    identical: bool,
    unchanged: bool,
    record: PublishRecord | None,
    workflow: str,
) -> Verdict:
    """What to do with one target.  ``identical``: what is there has the bytes to publish;
    ``unchanged``: what is there still has the content ``record`` was written with."""
    if not present:
        return Verdict("write", "")
    if regular and identical:
        return Verdict("keep", "")
    if mode == "overwrite":
        return Verdict("replace", "mode: overwrite")
    if not regular:
        return Verdict("refuse", "is not a regular file (a folder or a link)")
    if record is None:
        return Verdict("refuse", "was not published by hetflow (no run recorded in this HETFLOW_HOME wrote it)")
    if record.workflow != workflow:
        return Verdict("refuse", f"was published by workflow {record.workflow!r} (run {record.run_id}), not this one")
    if not unchanged:
        return Verdict("refuse", f"changed since run {record.run_id} published it")
    return Verdict("replace", f"this workflow's result from run {record.run_id}")


def _refused(rel: str, where: str, why: str) -> PublishError:
    return PublishError(f"publish {rel!r}: {where} already exists and {why}; {OVERWRITE_HINT}")


# --- entry points ---------------------------------------------------------------------------


class Publishing:
    """The runner's publisher: ``publish_step`` with the run's store and names."""

    def __init__(
        self, store: Ledger, run_id: str, workflow: str, s3: Callable[[str | None], ObjectStore] = s3_filesystem
    ) -> None:
        self.store, self.run_id, self.workflow, self.s3 = store, run_id, workflow, s3

    def __call__(self, name: str, step: Step, out_dir: Path, uid: int, gid: int) -> list[str]:
        by = By(self.run_id, self.workflow, name)
        return publish_step(step, out_dir, uid, gid, self.s3, ledger=self.store, by=by)


def publish_step(
    step: Step,
    out_dir: Path,
    uid: int,
    gid: int,
    s3: Callable[[str | None], ObjectStore] = s3_filesystem,
    *,
    ledger: Ledger | None = None,
    by: By | None = None,
) -> list[str]:
    """Publish every ``publish`` entry of ``step`` from its accepted outputs in ``out_dir``;
    returns the targets written (``file -> target`` lines for the run's events).  Without a
    ``ledger`` nothing is recorded and nothing different is replaced unless told."""
    done: list[str] = []
    for pub in step.publish:
        names = pub.outputs or step.outputs
        files = _files(out_dir, names)
        if pub.to.startswith("s3://"):
            done += _to_s3(pub, files, s3(pub.endpoint), ledger, by)
        else:
            done += _to_dir(pub, files, uid, gid, ledger, by)
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


def _said(rel: str, where: str, verdict: Verdict) -> str:
    if verdict.action == "keep":
        return f"{rel} -> {where} (already there, identical)"
    if verdict.action == "replace":
        return f"{rel} -> {where} (replaced {verdict.why})"
    return f"{rel} -> {where}"


def _claims(verdict: Verdict, record: PublishRecord | None, by: By | None) -> bool:
    """Whether this run records the target as its own: always once it wrote it; for identical
    bytes left in place, unless another workflow's record holds them (that workflow's rerun
    may still replace its own result)."""
    return verdict.action != "keep" or record is None or by is None or record.workflow == by.workflow


def _record(ledger: Ledger | None, by: By | None, target: str, sha: str, size: int, etag: str = "") -> None:
    if ledger is not None and by is not None:
        ledger.record_published(PublishRecord(target, sha, size, by.run_id, by.step, by.workflow, time.time(), etag))


# --- host folders ----------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """An exclusive flock on ``lock`` (created if missing; read-only is enough for flock, so
    another user who may write the folder but not the lock file can still take it)."""
    fd = os.open(lock, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _key(target: Path) -> str:
    """The record's key: the target with its folder resolved (two spellings, one file)."""
    return str(Path(os.path.realpath(target.parent)) / target.name)


def _to_dir(
    pub: Publish, files: list[tuple[str, Path]], uid: int, gid: int, ledger: Ledger | None, by: By | None
) -> list[str]:
    root = Path(pub.to)
    done = []
    for rel, src in files:
        target = root / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            sha, size = sha256_file(src), src.stat().st_size
            tmp = _stage(src, target, pub.mode == "link", uid, gid)
            try:
                with _locked(target.parent / LOCK_NAME):
                    verdict, record = _judge(pub.mode, target, sha, ledger, by)
                    if verdict.action == "refuse":
                        raise _refused(rel, str(target), verdict.why)
                    if verdict.action != "keep":
                        os.replace(tmp, target)
                        _fsync_dir(target.parent)
                    if _claims(verdict, record, by):
                        _record(ledger, by, _key(target), sha, size)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise PublishError(f"publish {rel!r} to {target}: {exc.strerror or exc}") from None
        done.append(_said(rel, str(target), verdict))
    return done


def _judge(
    mode: str, target: Path, sha: str, ledger: Ledger | None, by: By | None
) -> tuple[Verdict, PublishRecord | None]:
    present = target.exists() or target.is_symlink()
    regular = present and target.is_file() and not target.is_symlink()
    there = sha256_file(target) if regular else ""
    record = ledger.published(_key(target)) if ledger is not None and present else None
    verdict = decide(
        mode=mode,
        present=present,
        regular=regular,
        identical=there == sha,
        unchanged=record is not None and there == record.sha256,
        record=record,
        workflow=by.workflow if by is not None else "",
    )
    return verdict, record


def _stage(src: Path, target: Path, link: bool, uid: int, gid: int) -> Path:
    """The file to rename into place, in the target's folder: a hard link to the run's
    output for ``mode: link`` (a copy across file systems), else a copy, fsynced."""
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".hetflow-tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        if link:
            tmp.unlink()
            try:
                os.link(src, tmp)
                return tmp
            except OSError:
                pass
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        if os.geteuid() == 0:
            os.chown(tmp, uid, gid)  # the submitter owns what is published for them
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _fsync_dir(folder: Path) -> None:
    """The rename itself survives a crash once the folder is synced."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- S3 ---------------------------------------------------------------------------------------


def _md5(src: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with src.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _etag(fs: ObjectStore, key: str) -> str:
    return str(fs.info(key).get("ETag", "")).strip('"')


@contextlib.contextmanager
def _s3_locked(ledger: Ledger | None, url: str) -> Iterator[None]:
    """Publishers sharing one HETFLOW_HOME take turns per key (a lock file under it)."""
    if ledger is None:
        yield
        return
    locks = ledger.path.parent / "locks" / "publish"
    locks.mkdir(parents=True, exist_ok=True)
    with _locked(locks / hashlib.sha256(url.encode()).hexdigest()):
        yield


def _to_s3(
    pub: Publish, files: list[tuple[str, Path]], fs: ObjectStore, ledger: Ledger | None, by: By | None
) -> list[str]:
    prefix = pub.to.removeprefix("s3://").rstrip("/")
    done = []
    for rel, src in files:
        key = f"{prefix}/{rel}"
        url = f"s3://{key}"
        try:
            with _s3_locked(ledger, url):
                present = bool(fs.exists(key))
                etag = _etag(fs, key) if present else ""
                record = ledger.published(url) if ledger is not None and present else None
                # an ETag is the MD5 of the bytes when uploaded in one part ("-" marks a multipart one)
                verdict = decide(
                    mode=pub.mode,
                    present=present,
                    regular=True,
                    identical="-" not in etag and etag == _md5(src),
                    unchanged=record is not None and bool(record.etag) and etag == record.etag,
                    record=record,
                    workflow=by.workflow if by is not None else "",
                )
                if verdict.action == "refuse":
                    raise _refused(rel, url, verdict.why)
                if verdict.action != "keep":
                    _put(fs, src, key, _condition(verdict, pub.mode, etag, src))
                    etag = _etag(fs, key)
                if _claims(verdict, record, by):
                    _record(ledger, by, url, sha256_file(src), src.stat().st_size, etag)
        except PublishError:
            raise
        except _Raced:
            raise PublishError(
                f"publish {rel!r}: {url} was written by someone else while this run published it (left as"
                " they wrote it); run again to check it under the rule, or set 'mode: overwrite'"
            ) from None
        except Exception as exc:
            raise PublishError(f"publish {rel!r} to {url}: {str(exc).splitlines()[0][:300]}") from None
        done.append(_said(rel, url, verdict))
    return done


class _Raced(Exception):
    """A conditional write's precondition failed: the object changed after it was checked."""


def _condition(verdict: Verdict, mode: str, etag: str, src: Path) -> dict[str, str]:
    """The upload's precondition: none where replacing anything is asked for."""
    if verdict.action == "write":
        return {"mode": "create"}  # s3fs: PutObject with If-None-Match: *
    if mode != "overwrite" and src.stat().st_size < SINGLE_PUT:
        return {"IfMatch": f'"{etag}"'}
    return {}


def _put(fs: ObjectStore, src: Path, key: str, condition: dict[str, str]) -> None:
    try:
        fs.put_file(str(src), key, **condition)
    except FileExistsError:  # s3fs's answer to a failed If-None-Match
        raise _Raced() from None
    except OSError as exc:  # s3fs's answer to a failed If-Match (HTTP 412): EINVAL
        if condition and exc.errno == errno.EINVAL and "condition" in str(exc).lower():
            raise _Raced() from None
        raise
