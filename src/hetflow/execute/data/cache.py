"""The cross-run cache: a step's result is reused when nothing that could change it changed
(like Nextflow's -resume, but keyed on content, never on timestamps).

The key is the sha256 of a canonical JSON of what decides a step's result:
- the workflow and step names and the key format's version;
- the image's identity: the ID of the image the engine holds (a rebuild under the same tag
  changes it), or the digest a reference is pinned to;
- the variant chosen, the command after templating (argv: YAML layout does not matter,
  whitespace inside an argument does), the variant's environment, ``network``;
- the declared outputs;
- the content of every input: the sha256 an upstream step's output was recorded with in
  this run (an upstream step rerun with identical bytes leaves the key unchanged), and
  the content digest of workflow data (host files or S3 objects);
- the step's secrets (``secrets:``), each as an HMAC-SHA256 of its value under a random salt
  kept in HETFLOW_HOME/secrets.salt (``execute.secrets``): a changed secret runs the step again,
  and the key in the store cannot be tried against guessed values without the salt.

Resources (cores, memory), retries, estimates and the like do not enter it: they do not
change a result.  Entries live in the state store; their files in HETFLOW_HOME/cache/objects,
content-addressed.  Objects and a run's outputs never share an inode (issue 22: a hard link
let a user editing one run's output in place, with an editor that writes in place or ``>>``,
change the cache object and every other run's output linked to it; a read-only hard link
does not stop that, its owner may chmod it): each is its own copy, a reflink where the file
system can clone (btrfs, XFS: no bytes copied, copy-on-write) and a plain copy elsewhere
(a restored object of up to ``SMALL`` bytes is written from the bytes read to verify it).
A hit is verified before use: an object deleted or changed makes the entry go and the step run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetflow.execute.data.cachekey import Key
from hetflow.state import CacheEntry, OutputRecord, Store

SMALL = 1 << 20  # bytes: an object up to this size is read once on restore (verified, then written)
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int), the ioctl behind `cp --reflink`
PARTIAL_SUFFIX = ".tmp"  # an object being copied in is ``.SHA.tmpPID`` until it is whole
_PARTIAL = re.compile(r"\.([0-9a-f]{64})" + re.escape(PARTIAL_SUFFIX) + r"(\d+)")


def clone_or_copy(src: Path, dest: Path) -> None:
    """``dest`` becomes a file of its own with ``src``'s bytes: a reflink (FICLONE) where the
    file system shares blocks copy-on-write, else a copy (``shutil.copyfile``: sendfile, in
    the kernel).  Never a hard link: see the module's docstring."""
    with src.open("rb") as fin, dest.open("wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
            return
        except OSError:
            pass  # not supported here (ext4, tmpfs, overlay, across file systems): copy
    shutil.copyfile(src, dest)


def _new_folder(path: str) -> bool:
    """Make the folder ``path`` (and its parents); whether it is new (False: it was there)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        return False
    except FileNotFoundError:
        os.makedirs(path)
    return True


# --- the store of results -----------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    entry: CacheEntry
    outputs: list[OutputRecord]


class ResultCache:
    """Entries in the state store, their files in ``root/objects``."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store, self.root = store, root
        self.objects = root / "objects"
        self._objects = os.fspath(self.objects)
        # Small objects verified by this process: sha -> (the file's identity then, its bytes),
        # so that a rerun restoring one object for many steps reads and hashes it once; a
        # later restore checks the identity (``_unchanged``) and writes the bytes it verified.
        self._sound: dict[str, tuple[tuple[int, int, int, int], bytes]] = {}
        self._sound_bytes = 0
        self._manifests: dict[str, Any] = {}  # outputs_json -> its parsed manifest (read-only)

    def object_path(self, sha256: str) -> Path:
        return self.objects / sha256[:2] / sha256

    def save(self, key: Key, *, workflow: str, step: str, run_id: str, records: Sequence[OutputRecord]) -> None:
        """Keep the accepted outputs under ``key``: every file linked into the objects."""
        manifest = []
        size = 0
        for r in records:
            path = Path(r.path)
            files = (
                [(p.relative_to(path).as_posix(), p) for p in sorted(path.rglob("*")) if p.is_file()]
                if path.is_dir()
                else [("", path)]
            )
            entries = []
            for rel, p in files:
                sha = _sha256_file(p)
                self._keep(p, sha)
                n = p.stat().st_size
                size += n
                entries.append([rel, sha, n])
            manifest.append(
                {"name": r.name, "sha256": r.sha256, "size": r.size, "dir": path.is_dir(), "files": entries}
            )
        self.store.put_cache_entry(
            CacheEntry(
                key=key.digest,
                workflow=workflow,
                step=step,
                run_id=run_id,
                created=0.0,
                used=0.0,
                size=size,
                key_json=key.text,
                outputs_json=json.dumps(manifest),
            )
        )

    def _keep(self, src: Path, sha: str) -> None:
        target = self.object_path(sha)
        if target.exists() and target.stat().st_size == src.stat().st_size and target.stat().st_nlink == 1:
            return  # (an object an older hetflow hard-linked into a run is copied afresh: its own file)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{sha}{PARTIAL_SUFFIX}{os.getpid()}")  # ``partial_copies`` finds one left
        tmp.unlink(missing_ok=True)
        try:
            clone_or_copy(src, tmp)
        except OSError:
            tmp.unlink(missing_ok=True)  # a full disk leaves no partial object behind
            raise
        os.chmod(tmp, 0o444)  # nobody edits an object by mistake (the copy is what protects it)
        os.replace(tmp, target)

    def lookup(self, key: Key) -> CacheEntry | None:
        return self.store.cache_entry(key.digest)

    def restore(
        self, entry: CacheEntry, run_id: str, step: str, final: Path | str, touch: bool = True
    ) -> list[OutputRecord] | None:
        """Put the entry's outputs in ``final`` (verified first); None, and the entry dropped,
        when an object is gone or changed.  ``touch`` False: the caller records the entry's
        use itself (``Store.cache_steps``, many at once).  Paths are strings here: a cached
        rerun restores thousands of entries, and pathlib's objects cost more than the system
        calls."""
        manifest = self._manifests.get(entry.outputs_json)
        if manifest is None:
            manifest = json.loads(entry.outputs_json)
            if len(self._manifests) < _KEPT_MANIFESTS:
                self._manifests[entry.outputs_json] = manifest
        small: dict[str, bytes] = {}  # a small object's bytes, read once: verified, then written
        for out in manifest:
            for _rel, sha, size in out["files"]:
                sound, data = self._verify(sha, size)
                if not sound:
                    self.store.drop_cache_entry(entry.key)
                    return None
                if data is not None:
                    small[sha] = data
        done = os.fspath(final)
        staging, trash = done + ".cache", done + ".old"
        fresh = _new_folder(os.path.dirname(done))
        if fresh:  # nothing of the step here yet (a new run): write in place, nothing to swap
            staging = done
        elif os.path.lexists(staging):  # left by a restore that was interrupted
            shutil.rmtree(staging, ignore_errors=True)
        os.mkdir(staging)
        records = []
        for out in manifest:
            target = os.path.join(staging, out["name"])
            if "/" in out["name"]:
                os.makedirs(os.path.dirname(target), exist_ok=True)
            if out["dir"]:
                os.makedirs(target, exist_ok=True)
            for rel, sha, _size in out["files"]:
                dest = os.path.join(target, rel) if rel else target
                if "/" in rel:
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                self._place(self._object(sha), dest, small.get(sha))
            path = _child(done, out["name"])
            records.append(OutputRecord(run_id, step, out["name"], out["sha256"], out["size"], path))
        if not fresh:
            if os.path.lexists(done):
                shutil.rmtree(trash, ignore_errors=True)
                os.replace(done, trash)
            os.replace(staging, done)
            if os.path.lexists(trash):
                shutil.rmtree(trash, ignore_errors=True)
        if touch:
            self.store.touch_cache_entry(entry.key)
        return records

    def _object(self, sha256: str) -> str:
        """``object_path`` as a string."""
        return os.path.join(self._objects, sha256[:2], sha256)

    def _verify(self, sha: str, size: int) -> tuple[bool, bytes | None]:
        """Whether the object is a file of ``size`` bytes whose sha256 is ``sha``; with its
        bytes when it is small (``SMALL``), so that placing it reads it no second time."""
        path = self._object(sha)
        known = self._sound.get(sha)
        if known is not None and len(known[1]) == size:
            try:
                st = os.stat(path)
            except OSError:
                return False, None
            if stat.S_ISREG(st.st_mode) and _identity(st) == known[0]:
                return True, known[1]  # the same file, untouched since its bytes were verified
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return False, None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return False, None
            if size <= SMALL:
                data = os.read(fd, size + 1)  # one read: a regular file gives what it has
                sound = len(data) == size and hashlib.sha256(data).hexdigest() == sha
                if sound and self._sound_bytes + size <= _KEPT_BYTES and st.st_ctime_ns < _now_ns() - _RACY_NS:
                    self._sound[sha] = (_identity(st), data)
                    self._sound_bytes += size
                return sound, data
            h = hashlib.sha256()
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return h.hexdigest() == sha, None

    @staticmethod
    def _place(obj: str, dest: str, data: bytes | None = None) -> None:
        """The run's own copy of an object (a reflink where possible), writable by its owner
        as a step's outputs are: editing it changes neither the object nor another run.  A
        small object's bytes already read (``data``) are written as they are: a file of its
        own all the same, and a few system calls instead of a clone attempt and a copy."""
        if data is None:
            clone_or_copy(Path(obj), Path(dest))
            os.chmod(dest, 0o644)
            return
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, 0o644)  # whatever the umask, as the copy's chmod
        finally:
            os.close(fd)

    def prune(self, older_than: float | None) -> tuple[int, int]:
        """Drop entries last used before ``older_than`` (all when None) and the objects no
        entry names any more; returns (entries dropped, bytes freed)."""
        dropped = self.store.drop_cache_entries(older_than)
        keep: set[str] = set()
        for e in self.store.cache_entries():
            for out in json.loads(e.outputs_json):
                keep.update(sha for _rel, sha, _size in out["files"])
        freed = 0
        if self.objects.is_dir():
            for p in self.objects.rglob("*"):
                if p.is_file() and p.name not in keep:
                    freed += p.stat().st_size
                    p.unlink()
        return dropped, freed

    def disk_usage(self) -> int:
        if not self.objects.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.objects.rglob("*") if p.is_file())


def partial_copies(root: Path) -> list[tuple[Path, int]]:
    """The objects a ``save`` began copying into the cache under ``root`` and never finished
    (its process killed mid-copy), with the PID of the process that wrote each: what
    ``hetflow doctor`` removes once that process is gone (issue 37)."""
    objects = root / "objects"
    if not objects.is_dir():
        return []
    found = []
    for folder in sorted(objects.iterdir()):
        for p in sorted(folder.iterdir()) if folder.is_dir() else []:
            m = _PARTIAL.fullmatch(p.name)
            if m is not None:
                found.append((p, int(m.group(2))))
    return found


_KEPT_BYTES, _KEPT_MANIFESTS = 64 << 20, 100_000  # verified small objects' bytes, manifests a process keeps
# An object changed within a timestamp tick of its verification can keep its ctime (git's
# "racily clean" files): one changed this recently is verified again each time.
_RACY_NS = 2_000_000_000
_now_ns = time.time_ns


def _child(folder: str, name: str) -> str:
    """``str(Path(folder) / name)`` without pathlib's objects: a plain join where pathlib
    would only join (no empty or '.' part in ``name`` for it to drop)."""
    parts = name.split("/")
    if "" in parts or "." in parts:
        return str(Path(folder) / name)
    return f"{folder}/{name}" if folder != "/" else f"/{name}"


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is replaced, written or chmod-ed (no user sets a ctime back)."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _sha256_file(path: Path) -> str:
    from hetflow.execute.data.inputs import sha256_file  # globbing, S3: loaded when a result is kept

    return sha256_file(path)
