"""Host data as it is now: what ran is what was hashed (issue 37).

Workflow data on the host is listed and hashed when a run is submitted (``inputs``), but
containers read it where it lies, and a user may edit it at any time: after submit, while a
step runs, between a failure and ``hetflow resume``.  So a step's data inputs are looked at
again when it launches, and once more when it has ended:

- at launch, ``DataWatch.look`` lists and stats the files of each ``data.`` input of the step
  (a directory or a glob is listed again: files added or removed count), hashes again only the
  files whose stat signature (device, inode, size, mtime, ctime) moved since hetflow last hashed
  them, and returns the digests (what the step's cache key reads) with a fingerprint of every
  signature; a difference from the manifest is recorded in it and said once
  (``DataWatch.said``);
- when it has ended, ``DataWatch.changed_since`` compares the files' signatures with that
  fingerprint: any change (content, a rename over the file, a file added to a directory) means
  the step may have read other bytes than those hashed, so its result is not cached, it is
  marked as having run on changed inputs, and the user is told.

Signatures, not contents, are compared at the end: an edit put back before the step ended
still changes ctime.  Within one turn of the runner's loop a data input is listed once
(``new_turn``); the runner starts a turn just before it collects exits, so a look serving an
end check is never older than the exit it checks.  S3 data is a copy downloaded into the
run's folder when the run was submitted: it is fixed, and not looked at again.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from hetflow.execute.data.inputs import DIR, FILE, GLOB, S3, DataFile, DataManifest, DataSetFiles, HashMemo, hashed
from hetflow.spec import DATA_PREFIX, DataSet, Step

Signature = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns


@dataclass(frozen=True)
class Look:
    """A step's data inputs as one look found them: each reference's content digest (the
    cache key's part) and a fingerprint of the files' stat signatures."""

    digests: Mapping[str, str]
    fingerprint: str  # JSON: data reference -> sha256 of its files' (rel, signature)


def data_refs(step: Step) -> list[str]:
    """The step's ``data.`` inputs, each once, sorted."""
    return sorted({ref for ref in step.inputs.values() if ref.startswith(DATA_PREFIX)})


def _in_scope(rel: str, under: str) -> bool:
    return not under or rel == under or rel.startswith(under.rstrip("/") + "/")


def _signature(st: os.stat_result) -> Signature:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class DataWatch:
    """The run's data manifest kept true to the files: ``manifest`` is what hetflow last
    found, and what launches mount and keys read."""

    def __init__(self, manifest: DataManifest, sets: Mapping[str, DataSet], memo: HashMemo) -> None:
        self.manifest = manifest
        self.sets = sets  # the workflow's data entries (a glob's pattern)
        self.memo = memo
        self._signatures: dict[str, dict[str, Signature]] = {}  # set -> rel -> signature when hashed
        self._looked: dict[str, tuple[tuple[str, Signature], ...]] = {}  # ref -> its files, this turn
        self._unsaid: list[str] = []  # changes found and not said yet
        self.found: dict[str, str] = {}  # set -> every change found in it, in words

    def new_turn(self) -> None:
        """Forget this turn's listings: the next look at a data input lists it again."""
        self._looked.clear()

    def said(self) -> list[str]:
        """The changes found since the last call, in words (``data.NAME: a.sh changed``)."""
        out, self._unsaid = self._unsaid, []
        return out

    def look(self, step: Step) -> Look | None:
        """The step's data inputs now; None when it reads no data."""
        refs = data_refs(step)
        if not refs:
            return None
        digests: dict[str, str] = {}
        prints: dict[str, str] = {}
        for ref in refs:
            h = hashlib.sha256()
            for rel, sig in self._files(ref):
                h.update(f"{rel}\0{sig}\n".encode())
            prints[ref] = h.hexdigest()
            digests[ref] = self.manifest.digest(ref)
        return Look(digests, json.dumps(prints, sort_keys=True))

    def changed_since(self, step: Step, fingerprint: str) -> list[str]:
        """The step's data inputs whose files moved since the look that gave ``fingerprint``."""
        now = self.look(step)
        if now is None:
            return []
        try:
            then = json.loads(fingerprint)
        except ValueError:
            then = {}
        return [ref for ref, h in json.loads(now.fingerprint).items() if then.get(ref) != h]

    # --- listing ---------------------------------------------------------------------------

    def _files(self, ref: str) -> tuple[tuple[str, Signature], ...]:
        """(rel, signature) of every file under ``ref`` now, the manifest brought up to date."""
        if ref in self._looked:
            return self._looked[ref]
        ds, under = self.manifest.lookup(ref)
        if ds.kind == S3:
            return ()  # downloaded into the run's folder at submit: fixed
        known = {f.rel: f for f in ds.files}
        seen = self._signatures.setdefault(ds.name, {})
        fresh: dict[str, DataFile] = {}
        found: list[tuple[str, Signature]] = []
        for rel, path in sorted(self._listed(ds, under).items()):
            try:
                sig = _signature(path.stat())
            except OSError:
                continue  # gone between the listing and the stat: absent
            old = known.get(rel)
            if old is not None and seen.get(rel) == sig:
                fresh[rel] = old
            else:
                sha, size = hashed(path, self.memo)
                fresh[rel] = DataFile(rel, str(path), sha, size)
                seen[rel] = sig
            found.append((rel, sig))
        changes = [f"{r} added" for r in fresh if r not in known]
        changes += [f"{r} changed" for r, f in fresh.items() if r in known and known[r].sha256 != f.sha256]
        changes += [f"{r} removed" for r in known if _in_scope(r, under) and r not in fresh]
        if changes:
            kept = [f for f in ds.files if not _in_scope(f.rel, under)]
            files = tuple(sorted([*kept, *fresh.values()], key=lambda f: f.rel))
            sets = dict(self.manifest.sets)
            sets[ds.name] = replace(ds, files=files)
            self.manifest = DataManifest(sets)
            self.found[ds.name] = ", ".join(sorted({*self.found.get(ds.name, "").split(", "), *changes} - {""}))
            self._unsaid.append(f"data.{ds.name}: " + ", ".join(sorted(changes)))
        self._looked[ref] = tuple(found)
        return self._looked[ref]

    def _listed(self, ds: DataSetFiles, under: str) -> dict[str, Path]:
        """rel -> host path of the set's files under ``under`` as the file system holds them now."""
        root = Path(ds.root)
        if ds.kind == FILE:
            name = ds.files[0].rel if ds.files else root.name
            return {name: root} if root.is_file() else {}
        if ds.kind == DIR:
            base = root / under if under else root
            if base.is_file():
                return {under: base}
            if not base.is_dir():
                return {}
            return {p.relative_to(root).as_posix(): p for p in base.rglob("*") if p.is_file()}
        if ds.kind == GLOB:
            pattern = self.sets[ds.name].path if ds.name in self.sets else None
            if pattern is None:
                return {f.rel: Path(f.source) for f in ds.files if _in_scope(f.rel, under)}
            matches = (p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
            listed = {os.path.relpath(m, root): Path(m) for m in matches}
            return {r: p for r, p in listed.items() if _in_scope(r, under)}
        return {}
