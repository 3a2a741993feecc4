"""Publishing a step's outputs when it succeeds (like Nextflow's ``publishDir``): copied or
hard-linked into host folders, or uploaded under S3 prefixes; all of a step's files or none.

A step's publish set (every file of every ``publish`` entry) goes through one sequence:

1. the journal (``publishjournal``) names every file and where it will be staged;
2. each host file is staged beside its target (``.NAME.TOKEN.hetflow-tmp``, fsynced);
3. the target folders' locks are taken (``.hetflow-publish.lock``, one flock each, in one
   order; S3 keys: lock files under HETFLOW_HOME), so two runs publishing to one folder at
   once take turns: the second one sees the first one's file and its record, and the rule
   alone decides (never two successes with one file silently lost);
4. every target is judged by the rule (``publishrule.decide``) before any is replaced; one
   refused fails the step naming each refused file, and nothing is replaced;
5. the verdicts go into the journal; each target is replaced, what it replaces kept beside it
   (host: a hard link ``.NAME.TOKEN.hetflow-old``; S3: a server-side copy); a failure halfway
   puts back every target already replaced and removes every file already written;
6. the whole set is recorded in one transaction (the commit point), then the kept copies,
   the staged files and the journal go.

An executor killed anywhere in this leaves its journal: ``hetflow resume`` of the run and
``hetflow doctor --repair`` finish the set (recorded) or undo it (not recorded), and remove
what it staged.  S3 cannot replace several objects at once: what it can and cannot promise
is in ``publishs3``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from hetflow.execute.data.inputs import ObjectStore, s3_filesystem, sha256_file
from hetflow.execute.data.publishing import host as publishhost
from hetflow.execute.data.publishing import journal as publishjournal
from hetflow.execute.data.publishing import s3 as publishs3
from hetflow.execute.data.publishing.rule import (
    LOCK_NAME,
    By,
    Entry,
    Ledger,
    PublishError,
    Verdict,
    claims,
    decide,
    record_of,
    refusals,
    said,
)
from hetflow.spec import Step
from hetflow.state import PublishRecord

__all__ = ["LOCK_NAME", "By", "Ledger", "PublishError", "Publishing", "decide", "publish_step"]

S3Factory = Callable[[str | None], ObjectStore]
T = TypeVar("T")


class Publishing:
    """The runner's publisher: ``publish_step`` with the run's store and names."""

    def __init__(self, store: Ledger, run_id: str, workflow: str, s3: S3Factory = s3_filesystem) -> None:
        self.store, self.run_id, self.workflow, self.s3 = store, run_id, workflow, s3

    def __call__(self, name: str, step: Step, out_dir: Path, uid: int, gid: int) -> list[str]:
        by = By(self.run_id, self.workflow, name)
        return publish_step(step, out_dir, uid, gid, self.s3, ledger=self.store, by=by)


def publish_step(
    step: Step,
    out_dir: Path,
    uid: int,
    gid: int,
    s3: S3Factory = s3_filesystem,
    *,
    ledger: Ledger | None = None,
    by: By | None = None,
) -> list[str]:
    """Publish every ``publish`` entry of ``step`` from its accepted outputs in ``out_dir``, all
    or nothing; returns the targets written (``file -> target`` lines for the run's events).
    Without a ``ledger`` nothing is recorded (nor journaled) and nothing different is replaced
    unless told."""
    entries = _entries(step, out_dir)
    stores = {e.endpoint: s3(e.endpoint) for e in entries if e.s3}
    journal = publishjournal.journal_path(ledger, by) if ledger is not None and by is not None else None
    run = _Set(entries, stores, ledger, by, journal)
    run.journal_now()
    try:
        lines = run.publish(uid, gid)
    except BaseException:
        if not run.applied:  # else the targets changed could not all be put back: the journal and
            run.clean()  # the kept copies stay for resume and the doctor to settle
        raise
    run.clean()
    return lines


class _Set:
    """One publish set on its way: staged, judged, applied, recorded (or refused, or undone)."""

    def __init__(
        self,
        entries: list[Entry],
        stores: dict[str | None, ObjectStore],
        ledger: Ledger | None,
        by: By | None,
        journal: Path | None,
    ) -> None:
        self.entries, self.stores, self.ledger, self.by, self.journal = entries, stores, ledger, by, journal
        self.applied: list[Entry] = []  # the targets changed and not put back

    def journal_now(self) -> None:
        if self.journal is not None and self.by is not None:
            publishjournal.write(self.journal, self.by, self.entries)

    def publish(self, uid: int, gid: int) -> list[str]:
        for e in self.entries:
            if not e.s3:
                _host(e, lambda e=e: publishhost.stage(e, uid, gid))  # type: ignore[misc]
        with contextlib.ExitStack() as held:
            for path in [*publishhost.lock_files(self.entries), *publishs3.lock_files(self.ledger, self.entries)]:
                held.enter_context(publishhost.lock(path))
            judged = [self._judge(e) for e in self.entries]
            refused = [(e, v) for e, v, _ in judged if v.action == "refuse"]
            if refused:
                raise refusals(refused, len(self.entries))
            self.entries = [dataclasses.replace(e, action=v.action) for e, v, _ in judged]
            self.journal_now()  # the verdicts, before the first target changes
            etags = self._apply()
            by = self.by
            records = [] if by is None else [
                record_of(e, by, etags.get(e.target, e.etag))
                for (_, v, r), e in zip(judged, self.entries, strict=True)
                if claims(v, r, by)
            ]  # fmt: skip
            if self.ledger is not None and records:
                self._commit(records)
        self.applied = []
        return [said(e, v) for e, v, _ in judged]

    def _judge(self, e: Entry) -> tuple[Entry, Verdict, PublishRecord | None]:
        if not e.s3:
            verdict, record = _host(e, lambda: publishhost.judge(e, self.ledger, self.by))
            return e, verdict, record
        verdict, record, etag = _s3(e, lambda: publishs3.judge(e, self.stores[e.endpoint], self.ledger, self.by))
        return dataclasses.replace(e, etag=etag), verdict, record

    def _apply(self) -> dict[str, str]:
        """Replace every target to change; on a failure, put back the ones replaced and fail
        naming them.  The new ETags of the S3 objects written."""
        etags: dict[str, str] = {}
        current: Entry | None = None
        try:
            for e in self.entries:
                if e.action not in ("write", "replace"):
                    continue
                current = e
                if e.s3:
                    etags[e.target] = _s3(e, lambda e=e: publishs3.apply(e, self.stores[e.endpoint]))  # type: ignore[misc]
                else:
                    _host(e, lambda e=e: publishhost.apply(e))  # type: ignore[misc]
                self.applied.append(e)
                current = None
        except BaseException as exc:
            self._undo(exc, current)
            raise
        return etags

    def _commit(self, records: list[PublishRecord]) -> None:
        """Record the whole set in one transaction; a failure to record puts the targets back."""
        assert self.ledger is not None
        try:
            self.ledger.record_published(*records)
        except BaseException as exc:
            self._undo(exc)
            raise

    def _undo(self, cause: BaseException, failed: Entry | None = None) -> None:
        """Put back what was changed, last first (``failed``: a host target whose replacement
        failed halfway, its copy kept); an error here leaves the journal and the kept copies
        for ``hetflow resume``/``doctor --repair`` to finish the job."""
        try:
            if failed is not None and not failed.s3:
                publishhost.undo(failed)
            for e in reversed(self.applied):
                if e.s3:
                    publishs3.undo(e, self.stores[e.endpoint])
                else:
                    publishhost.undo(e)
        except Exception as exc:
            raise PublishError(
                f"{cause}; putting back what was published before it failed too ({exc}): 'hetflow doctor"
                " --repair' or 'hetflow resume' puts the kept copies back"
            ) from None
        names, self.applied = ", ".join(repr(e.rel) for e in self.applied), []
        if names and isinstance(cause, PublishError):
            whole = "a step publishes all its files or none"
            raise PublishError(f"{cause}; {names} put back as it was ({whole})") from None

    def clean(self) -> None:
        """Remove the staged files and kept copies, then the journal (which stays while one
        could not be removed: the doctor finds it)."""
        left = False
        for e in self.entries:
            try:
                if e.s3:
                    publishs3.clean(e, self.stores[e.endpoint])
                else:
                    publishhost.clean(e)
            except Exception:
                left = True
        if self.journal is not None and not left:
            self.journal.unlink(missing_ok=True)


def _entries(step: Step, out_dir: Path) -> list[Entry]:
    """Every file of the step's publish set, hashed, each with its own token."""
    entries = []
    for pub in step.publish:
        root = pub.to.rstrip("/") if pub.to.startswith("s3://") else str(Path(pub.to))
        for rel, src in _files(out_dir, pub.outputs or step.outputs):
            target = f"{root}/{rel}"
            e = Entry(rel, str(src), target, pub.mode, sha256_file(src), src.stat().st_size, secrets.token_hex(6))
            if e.s3:
                e = dataclasses.replace(e, endpoint=pub.endpoint, md5=publishs3.md5_file(src))
            entries.append(e)
    return entries


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


def _host(e: Entry, act: Callable[[], T]) -> T:
    """``act`` on a host target; an OSError becomes the step's message, naming the file."""
    try:
        return act()
    except OSError as exc:
        raise PublishError(f"publish {e.rel!r} to {e.target}: {exc.strerror or exc}") from None


def _s3(e: Entry, act: Callable[[], T]) -> T:
    try:
        return act()
    except PublishError:
        raise
    except publishs3.Raced:
        raise PublishError(
            f"publish {e.rel!r}: {e.target} was written by someone else while this run published it (left as"
            " they wrote it); run again to check it under the rule, or set 'mode: overwrite'"
        ) from None
    except Exception as exc:
        raise PublishError(f"publish {e.rel!r} to {e.target}: {str(exc).splitlines()[0][:300]}") from None
