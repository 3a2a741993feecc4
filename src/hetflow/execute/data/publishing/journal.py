"""The publish journal: what a publish set is doing, written before it touches a target, so
that what a killed executor left (issue 37: ``.NAME.*.hetflow-tmp`` in the user's folder, and a
set half replaced) is finished or undone later.

One JSON file per publishing step, ``HETFLOW_HOME/publishing/RUN.STEP.json``, written atomically
(a temporary file, fsynced, renamed): first with every file's staged name before anything is
staged, then with every verdict before the first target is replaced.  It goes once the set is
settled (recorded, or refused, or undone).  A journal still there means its publish was cut
short: ``settle`` looks at the records, the commit point of a publish (one transaction for the
whole set): when they say the set was published, only the staged files and kept copies are
removed; otherwise every target is put back as it was (``publishhost.undo``,
``publishs3.undo``).  ``hetflow resume RUN`` settles the run's journals before anything runs
again; ``hetflow doctor`` lists the journals of runs no executor holds, and ``--repair``
settles them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hetflow.execute.data.inputs import ObjectStore, s3_filesystem
from hetflow.execute.data.publishing import host as publishhost
from hetflow.execute.data.publishing import s3 as publishs3
from hetflow.execute.data.publishing.rule import By, Entry, Ledger
from hetflow.state import Note, Store, record

JOURNALS = "publishing"
S3Factory = Callable[[str | None], ObjectStore]


@dataclass(frozen=True)
class Journal:
    path: Path
    by: By
    entries: tuple[Entry, ...]

    def folders(self) -> list[str]:
        """Where its targets are, each once: what the doctor names."""
        return list(dict.fromkeys(e.target.rpartition("/")[0] for e in self.entries))


def journal_path(ledger: Ledger, by: By) -> Path:
    return ledger.path.parent / JOURNALS / f"{by.run_id}.{by.step}.json"


def write(path: Path, by: By, entries: list[Entry]) -> None:
    """The journal, replaced whole (a reader sees the old one or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"by": dataclasses.asdict(by), "entries": [dataclasses.asdict(e) for e in entries]})
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def read(path: Path) -> Journal | None:
    """A journal; None when it cannot be read (a torn temporary file is never renamed in)."""
    try:
        data = json.loads(path.read_text())
        return Journal(path, By(**data["by"]), tuple(Entry(**e) for e in data["entries"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def journals(ledger: Ledger, run_id: str | None = None) -> list[Journal]:
    """Every journal left under this HETFLOW_HOME (of ``run_id`` only, when given)."""
    folder = ledger.path.parent / JOURNALS
    found = sorted(folder.glob(f"{run_id}.*.json" if run_id else "*.json")) if folder.is_dir() else []
    return [j for j in map(read, found) if j is not None and (run_id is None or j.by.run_id == run_id)]


def committed(j: Journal, ledger: Ledger) -> bool:
    """Whether the set's records were written (the commit point): every file it writes or
    replaces is recorded as this run's, with these bytes."""
    changing = [e for e in j.entries if e.action in ("write", "replace")]
    if not changing or any(not e.action for e in j.entries):
        return False
    for e in changing:
        r = ledger.published(e.key)
        if r is None or (r.run_id, r.sha256) != (j.by.run_id, e.sha256):
            return False
    return True


def leftovers(j: Journal) -> list[str]:
    """The staged files and kept copies it left in host folders (S3 is not asked)."""
    return [p for e in j.entries if not e.s3 for p in publishhost.leftovers(e)]


def settle(j: Journal, ledger: Ledger, s3: S3Factory = s3_filesystem) -> str:
    """Finish (records written) or undo (otherwise) what ``j``'s publish left; what was done.
    The journal stays when a target could not be put back (the error says which)."""
    stores = {e.endpoint: s3(e.endpoint) for e in j.entries if e.s3}
    done = committed(j, ledger)
    with contextlib.ExitStack() as held:
        for path in [*publishhost.lock_files(list(j.entries)), *publishs3.lock_files(ledger, list(j.entries))]:
            held.enter_context(publishhost.lock(path))
        for e in j.entries:
            if e.s3:
                if not done:
                    publishs3.undo(e, stores[e.endpoint])
                publishs3.clean(e, stores[e.endpoint])
            else:
                if not done:
                    publishhost.undo(e)
                publishhost.clean(e)
    j.path.unlink(missing_ok=True)
    names = ", ".join(e.rel for e in j.entries)
    if done:
        return f"finished an interrupted publish of step {j.by.step!r} (its records were written): {names}"
    return f"undid an interrupted publish of step {j.by.step!r}, every target as it was before it: {names}"


def settle_run(store: Store, run_id: str, s3: S3Factory = s3_filesystem) -> list[str]:
    """Settle every journal ``run_id``'s killed executor left (``hetflow resume``), each said in
    the run's events; a journal that cannot be settled now is left for the doctor, said too."""
    said = []
    for j in journals(store, run_id):
        try:
            message = settle(j, store, s3)
        except Exception as exc:  # S3 out of reach, a folder gone read-only: the journal stays
            message = f"could not undo an interrupted publish of step {j.by.step!r} ({exc}); 'hetflow doctor' lists it"
        record(store, Note(0, run_id, time.time(), message, j.by.step, "collected"))
        said.append(message)
    return said
