"""Publishing under an S3 prefix: each step of a publish set, for one object.

What S3 can make atomic, and what it cannot.  One object's write is atomic, and conditional:
``If-None-Match: *`` for a new key, ``If-Match: ETAG`` (the ETag checked) for a replacement,
both honoured by AWS S3 since 2024 and by moto, so an object someone wrote between hetflow's
check and its upload fails the step instead of vanishing (a file of 100 MiB or more is uploaded
in parts; s3fs makes only the new-key case conditional there).  A set of objects has no
transaction: S3 cannot replace two keys at once, and a reader listing the prefix while a step
publishes may see some objects new and some old.  So hetflow comes as close as S3 allows:
every key is checked before any is written (a refused one leaves them all as they were), each
object replaced is first copied server-side beside itself (``.NAME.TOKEN.hetflow-old``), and
a failure halfway (a conditional write refused, the network) puts the replaced ones back from
those copies and deletes the ones it created; a publish killed halfway is put back the same
way by ``hetflow resume`` or ``hetflow doctor --repair`` (when S3 can be reached then).

S3 has no flock: publishers sharing one HETFLOW_HOME take turns per key through a lock file
under it; others are held off by the conditional writes alone.
"""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

from hetflow.execute.data.inputs import ObjectStore
from hetflow.execute.data.publishing.rule import KEPT_SUFFIX, By, Entry, Ledger, Verdict, decide
from hetflow.state import PublishRecord

SINGLE_PUT = 100 * 2**20  # s3fs uploads a file under 2 x its 50 MiB chunk in one PutObject (If-Match goes there)


class Raced(Exception):
    """A conditional write's precondition failed: the object changed after it was checked."""


def key_of(e: Entry) -> str:
    return e.target.removeprefix("s3://")


def kept_key(e: Entry) -> str:
    return e.beside(KEPT_SUFFIX).removeprefix("s3://")


def md5_file(src: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with src.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def etag_of(fs: ObjectStore, key: str) -> str:
    return str(fs.info(key).get("ETag", "")).strip('"')


def lock_files(ledger: Ledger | None, entries: list[Entry]) -> list[Path]:
    """Publishers sharing one HETFLOW_HOME take turns per key (a lock file under it, named by
    the URL's hash), in one order for every publisher."""
    if ledger is None or not any(e.s3 for e in entries):
        return []
    locks = ledger.path.parent / "locks" / "publish"
    locks.mkdir(parents=True, exist_ok=True)
    return sorted({locks / hashlib.sha256(e.target.encode()).hexdigest() for e in entries if e.s3})


def judge(e: Entry, fs: ObjectStore, ledger: Ledger | None, by: By | None) -> tuple[Verdict, PublishRecord | None, str]:
    """The verdict, the key's record and the ETag found (what a replacement must still find)."""
    key = key_of(e)
    present = bool(fs.exists(key))
    etag = etag_of(fs, key) if present else ""
    record = ledger.published(e.target) if ledger is not None and present else None
    # an ETag is the MD5 of the bytes when uploaded in one part ("-" marks a multipart one)
    verdict = decide(
        mode=e.mode,
        present=present,
        regular=True,
        identical="-" not in etag and etag == e.md5,
        unchanged=record is not None and bool(record.etag) and etag == record.etag,
        record=record,
        workflow=by.workflow if by is not None else "",
    )
    return verdict, record, etag


def apply(e: Entry, fs: ObjectStore) -> str:
    """Upload ``e`` under its condition, a server-side copy of what it replaces kept first;
    the new ETag.  Raced when the object changed since it was checked."""
    key = key_of(e)
    if e.action == "replace":
        fs.copy(key, kept_key(e))
    if e.action == "write":
        condition = {"mode": "create"}  # s3fs: PutObject with If-None-Match: *
    elif e.mode != "overwrite" and e.size < SINGLE_PUT:
        condition = {"IfMatch": f'"{e.etag}"'}
    else:
        condition = {}
    try:
        fs.put_file(e.src, key, **condition)
    except FileExistsError:  # s3fs's answer to a failed If-None-Match
        raise Raced() from None
    except OSError as exc:  # s3fs's answer to a failed If-Match (HTTP 412): EINVAL
        if condition and exc.errno == errno.EINVAL and "condition" in str(exc).lower():
            raise Raced() from None
        raise
    return etag_of(fs, key)


def undo(e: Entry, fs: ObjectStore) -> None:
    """Put ``e``'s key back as it was: the kept copy copied back, an object this publish
    created (its bytes are ours) deleted."""
    key, copy = key_of(e), kept_key(e)
    if e.action == "replace" and fs.exists(copy):
        fs.copy(copy, key)
    elif e.action == "write" and fs.exists(key) and etag_of(fs, key) == e.md5:
        fs.rm_file(key)


def clean(e: Entry, fs: ObjectStore) -> None:
    if e.action == "replace" and fs.exists(kept_key(e)):
        fs.rm_file(kept_key(e))


def leftovers(e: Entry, fs: ObjectStore) -> list[str]:
    return [f"s3://{kept_key(e)}"] if e.action == "replace" and fs.exists(kept_key(e)) else []
