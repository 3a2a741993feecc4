"""hetflow's cross-run cache (``execute.ResultCache``) for CWL jobs: a rerun, or a rerun after
``kill -9``, takes a finished job's outputs from it instead of running its container again.

The key is the sha256 of a canonical JSON of the image's identity (its ID: a rebuild under the
same tag changes it), the command line, the environment, NetworkAccess and the content of every
file the container is given (inputs, InitialWorkDir, what cwltool staged in the output
directory).  cwltool names a job's output and staging directories at random (``/abcdef``,
``/var/lib/cwl/stg…``); they are replaced by placeholders first, so the same job keys the same
in every run.  The outputs kept are the job's whole output directory, collected by cwltool
afterwards as for a job that ran."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from hetflow.cwl.keep.storethread import StoreThread
from hetflow.execute import Key, Mount, ResultCache, sha256_of
from hetflow.state import OutputRecord

KEY_VERSION = "cwl-3"  # cwl-1 and 2 kept jobs the cache cannot give back as they were (keepable)
# cwltool stages each input in a folder of its own, /var/lib/cwl/stg<uuid4>/NAME
STAGED = re.compile(r"stg[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OUTDIR_NAME = "outdir"


def job_key(
    *,
    image_id: str,
    command: Sequence[str],
    env: Mapping[str, str],
    network: bool,
    mounts: Sequence[Mount],
    places: Mapping[str, str],
) -> Key:
    """``places``: cwltool's random directories in the container -> their placeholders."""

    def plain(text: str) -> str:
        for path, name in sorted(places.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(path, name)
        return STAGED.sub("stg", text)

    inputs = sorted((plain(m.target), sha256_of(Path(m.source))) for m in mounts if os.path.exists(m.source))
    doc = {
        "version": KEY_VERSION,
        "image": image_id,
        "command": [plain(a) for a in command],
        "env": {k: plain(v) for k, v in sorted(env.items())},
        "network": network,
        "inputs": inputs,
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return Key(hashlib.sha256(text.encode()).hexdigest(), text)


class JobCache:
    """Every call runs on the store's thread (``StoreThread``)."""

    def __init__(self, owner: StoreThread, root: Path) -> None:
        self.owner = owner
        self.cache = ResultCache(owner.store, root)

    def restore(self, key: Key, run_id: str, step: str, outdir: Path, scratch: Path) -> str | None:
        """Put a cached result's files in ``outdir``; the run it came from, or None (no entry,
        or one whose objects are gone)."""
        entry = self.owner.call(lambda _: self.cache.lookup(key))
        if entry is None:
            return None
        scratch.parent.mkdir(parents=True, exist_ok=True)
        records = self.owner.call(lambda _: self.cache.restore(entry, run_id, step, scratch))
        if records is None:
            return None
        kept = scratch / OUTDIR_NAME
        for item in kept.iterdir() if kept.is_dir() else ():
            dest = outdir / item.name
            if dest.is_dir() and not dest.is_symlink():
                shutil.rmtree(dest)
            elif dest.exists() or dest.is_symlink():
                dest.unlink()
            shutil.move(str(item), dest)
        shutil.rmtree(scratch, ignore_errors=True)
        return entry.run_id

    def save(self, key: Key, run_id: str, step: str, workflow: str, outdir: Path) -> None:
        """Keep a job that ended 0 (``keepable``): files only, so one that left an empty folder
        is not kept (the cache would give it back without)."""
        record = OutputRecord(run_id, step, OUTDIR_NAME, sha256_of(outdir), 0, str(outdir))
        self.owner.call(lambda _: self.cache.save(key, workflow=workflow, step=step, run_id=run_id, records=[record]))


def keepable(exit_code: int, outdir: Path) -> bool:
    """Whether a job's result can come back from the cache as it was: it ended 0 (a non-zero
    success code is an output ``$(runtime.exitCode)`` reads), wrote no ``cwl.output.json`` and
    left no empty folder."""
    if exit_code != 0 or (outdir / "cwl.output.json").exists():
        return False  # cwl.output.json may name the run's own staging paths (stg<uuid>)
    return all(any(p.is_file() for p in d.rglob("*")) for d in outdir.rglob("*") if d.is_dir())
