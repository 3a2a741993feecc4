"""Content-addressed storage on disk: verified blobs and the filtered indexes.

Layout under the state directory:

    blobs/sha256/<hex>            verified upstream blobs (a cache: safe to delete)
    filtered/<hex>                filtered index bytes, named by their own sha256
    filtered/<hex>.json           {media_type, views: [[repo, source digest, machine type]]}

A file appears under its final name only after its bytes hashed to that name
(written to a temporary file, then renamed), so a reader never sees a partial or
unverified file there.  Temporary ``.part-*`` files a crash left behind are removed
when a store opens.  The blob cache is bounded (``quota``): after each new blob the
least recently served blobs go until the rest fit (atime is set on every serve, so
``noatime`` mounts do not matter).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DIGEST_RE", "BlobStore", "BlobWriter", "FilteredRecord", "FilteredStore", "View", "new_hasher"]

# descriptor.md "Digests": algorithm ":" encoded; only the registered algorithms
# sha256 and sha512 are accepted, lower-case hex of the right length.
DIGEST_RE = re.compile(r"(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})\Z")
CHUNK = 1024 * 1024


def new_hasher(digest: str) -> Any:
    """A hashlib object for the algorithm of ``digest`` (sha256 or sha512)."""
    algorithm = digest.split(":", 1)[0]
    if algorithm not in ("sha256", "sha512"):
        raise ValueError(f"unsupported digest algorithm {algorithm!r}")
    return hashlib.new(algorithm)


def _encoded(digest: str) -> tuple[str, str]:
    if not DIGEST_RE.match(digest):
        raise ValueError(f"malformed digest {digest!r}")
    algorithm, _, encoded = digest.partition(":")
    return algorithm, encoded


class BlobWriter:
    """A blob being written: bytes go to a temporary file beside the final one; the
    caller, who hashed them, calls ``commit`` after checking the digest or ``discard``."""

    def __init__(self, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=final.parent, prefix=".part-")
        self._file = os.fdopen(fd, "wb")
        self._tmp = Path(name)
        self._final = final
        self._open = True

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)

    def commit(self) -> None:
        if self._open:
            self._open = False
            self._file.close()
            os.replace(self._tmp, self._final)

    def discard(self) -> None:
        if self._open:
            self._open = False
            try:
                self._file.close()  # flushes: fails again on a full disk
            except OSError:
                pass
            finally:
                self._tmp.unlink(missing_ok=True)


class BlobStore:
    """Verified blobs by digest.  Readers re-hash what they serve (see ``verify``), so a
    file damaged on disk after it was stored is caught and removed, never served."""

    def __init__(self, root: Path, *, quota: int | None = None) -> None:
        self.root = root
        self.quota = quota
        _clean_parts(root)

    def path(self, digest: str) -> Path:
        algorithm, encoded = _encoded(digest)
        return self.root / algorithm / encoded

    def size(self, digest: str) -> int | None:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            return None

    def writer(self, digest: str) -> BlobWriter:
        return BlobWriter(self.path(digest))

    def remove(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def touch(self, digest: str) -> None:
        """Mark ``digest`` as just served (its access time), for LRU eviction."""
        with contextlib.suppress(OSError):
            os.utime(self.path(digest), (time.time(), self.path(digest).stat().st_mtime))

    def evict(self, keep: str | None = None) -> list[Path]:
        """Remove the least recently served blobs until the cache fits ``quota``
        (``keep``, the blob just stored, goes last).  Returns what was removed."""
        if self.quota is None:
            return []
        files: list[tuple[float, int, Path]] = []
        total = 0
        keep_path = self.path(keep) if keep else None
        for path in self.root.glob("*/*"):
            if path.name.startswith(".part-"):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            total += st.st_size
            files.append((float("inf") if path == keep_path else st.st_atime, st.st_size, path))
        removed: list[Path] = []
        for _, size, path in sorted(files, key=lambda f: f[0]):
            if total <= self.quota:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed.append(path)
        return removed

    def chunks(self, digest: str) -> Iterator[bytes]:
        with self.path(digest).open("rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk


@dataclass(frozen=True)
class View:
    """One machine type's view of one upstream index in one repository."""

    repo: str
    source: str  # the upstream index's digest
    machine_type: str


@dataclass(frozen=True)
class FilteredRecord:
    """One filtered index: its bytes, and every view it is."""

    digest: str
    body: bytes
    media_type: str
    views: frozenset[View]

    def is_view_of(self, repo: str, machine_type: str) -> bool:
        return any(v.repo == repo and v.machine_type == machine_type for v in self.views)

    def sources(self, repo: str) -> list[str]:
        return sorted({v.source for v in self.views if v.repo == repo})


class FilteredStore:
    """Filtered indexes by their own digest, kept across restarts: on disk, and the most
    recently used up to ``memo_bytes`` in memory (a view keeps its index's annotations, so
    one may be megabytes: issue 38)."""

    def __init__(self, root: Path, memo_bytes: int = 16 * 1024 * 1024) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        _clean_parts(root)
        self.memo_bytes = memo_bytes
        self._memo: OrderedDict[str, FilteredRecord] = OrderedDict()
        self._memo_held = 0

    def get(self, digest: str) -> FilteredRecord | None:
        if digest in self._memo:
            self._memo.move_to_end(digest)
            return self._memo[digest]
        if not digest.startswith("sha256:") or not DIGEST_RE.match(digest):
            return None
        hex_ = digest.removeprefix("sha256:")
        try:
            body = (self.root / hex_).read_bytes()
            meta = json.loads((self.root / f"{hex_}.json").read_text(encoding="utf-8"))
            views = frozenset(View(str(r), str(s), str(t)) for r, s, t in meta["views"])
            media_type = str(meta["media_type"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError, ValueError, TypeError):
            return None
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            return None  # damaged on disk: never served; the next tag request writes it again
        return self._remember(FilteredRecord(digest, body, media_type, views))

    def _remember(self, record: FilteredRecord) -> FilteredRecord:
        old = self._memo.pop(record.digest, None)
        self._memo_held -= len(old.body) if old else 0
        if len(record.body) <= self.memo_bytes:
            self._memo[record.digest] = record
            self._memo_held += len(record.body)
        while self._memo_held > self.memo_bytes:
            self._memo_held -= len(self._memo.popitem(last=False)[1].body)
        return record

    def put(self, digest: str, body: bytes, media_type: str, view: View) -> FilteredRecord:
        """Record that ``view`` is ``body`` (whose sha256 the caller computed as ``digest``)."""
        old = self.get(digest)
        if old is not None and view in old.views:
            return old
        hex_ = digest.removeprefix("sha256:")
        if old is None:
            _atomic_write(self.root / hex_, body)
        views = (old.views if old else frozenset()) | {view}
        meta = {"media_type": media_type, "views": sorted([v.repo, v.source, v.machine_type] for v in views)}
        _atomic_write(self.root / f"{hex_}.json", json.dumps(meta, sort_keys=True).encode())
        return self._remember(FilteredRecord(digest, body, media_type, views))


def _atomic_write(path: Path, data: bytes) -> None:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def _clean_parts(root: Path) -> None:
    """Remove the temporary files a crash left (nobody writes them before the store opens)."""
    for pattern in (".part-*", "*/.part-*"):
        for path in root.glob(pattern):
            path.unlink(missing_ok=True)
