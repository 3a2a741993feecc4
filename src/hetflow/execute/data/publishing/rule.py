"""What publishing may replace (one rule for host folders and S3), and the values every part of
publishing shares: who publishes, one file of a publish set, the error a step fails with.

The rule (``decide``):
- nothing there: written; the same bytes there: left as they are;
- a folder there: refused, whatever the mode (a file cannot replace a folder: checked with the
  others, before anything is replaced, not found by a failed rename halfway through the set);
- ``mode: overwrite``: replaced, whatever else is there;
- a file hetflow published there itself, for the same workflow name, whose content is still
  what it recorded (sha256; an S3 object's ETag): replaced.  A rerun after a change replaces
  its own earlier result, as Nextflow's publishDir overwrites by default;
- anything else (a file hetflow did not publish, one published by another workflow, one
  changed since it was published, a link): refused, naming the file, why, and what to change.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from hetflow.errors import HetflowError
from hetflow.state import PublishRecord

LOCK_NAME = ".hetflow-publish.lock"
OVERWRITE_HINT = "remove it, publish elsewhere, or set 'mode: overwrite'"
FOLDER_HINT = "remove it or publish elsewhere"
TMP_SUFFIX, KEPT_SUFFIX = ".hetflow-tmp", ".hetflow-old"  # beside a target: staged, kept copy


class PublishError(HetflowError):
    """A result could not be published (the step fails with this message)."""


class Ledger(Protocol):
    """Where publishes are recorded (``state.Store``)."""

    path: Path

    def published(self, target: str) -> PublishRecord | None: ...

    def record_published(self, *records: PublishRecord) -> None: ...


@dataclass(frozen=True)
class By:
    """Who publishes: the run, its workflow's name and the step."""

    run_id: str
    workflow: str
    step: str


Action = Literal["write", "keep", "replace", "refuse"]


@dataclass(frozen=True)
class Verdict:
    action: Action
    why: str  # for "replace" and "refuse": whose file it is, or why it may not be replaced
    hint: str = OVERWRITE_HINT  # for "refuse": what to change


def decide(
    *,
    mode: str,
    present: bool,
    regular: bool,
    identical: bool,
    unchanged: bool,
    record: PublishRecord | None,
    workflow: str,
    folder: bool = False,
) -> Verdict:
    """What to do with one target.  ``identical``: what is there has the bytes to publish;
    ``unchanged``: what is there still has the content ``record`` was written with."""
    if not present:
        return Verdict("write", "")
    if folder:
        return Verdict("refuse", "is a folder, which a file cannot replace", FOLDER_HINT)
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


@dataclass(frozen=True)
class Entry:
    """One file of a step's publish set, as the publish journal keeps it: enough to finish
    or undo it after the executor was killed (``publishjournal``)."""

    rel: str  # path under the step's /out
    src: str  # the host file published (the step's accepted output)
    target: str  # a host path, or s3://BUCKET/KEY
    mode: str
    sha256: str
    size: int
    token: str  # names the staged file and the kept copy: .NAME.TOKEN.hetflow-tmp / -old
    endpoint: str | None = None  # S3: where the bucket is
    action: str = ""  # the verdict's once every target is judged ("": staged, not judged)
    etag: str = ""  # S3: the ETag found when judged (what a replacement must still find)
    md5: str = ""  # S3: our bytes' MD5 (a single-part upload's ETag)

    @property
    def s3(self) -> bool:
        return self.target.startswith("s3://")

    def beside(self, suffix: str) -> str:
        """A name in the target's own folder (prefix): the staged file or the kept copy."""
        head, _, name = self.target.rpartition("/")
        return f"{head}/.{name}.{self.token}{suffix}"

    @property
    def key(self) -> str:
        """The publish record's key: the target with its folder resolved (two spellings, one
        file); an S3 target's URL."""
        if self.s3:
            return self.target
        return str(Path(os.path.realpath(Path(self.target).parent)) / Path(self.target).name)


def record_of(e: Entry, by: By, etag: str = "") -> PublishRecord:
    return PublishRecord(e.key, e.sha256, e.size, by.run_id, by.step, by.workflow, time.time(), etag)


def claims(verdict: Verdict, record: PublishRecord | None, by: By | None) -> bool:
    """Whether this run records the target as its own: always once it wrote it; for identical
    bytes left in place, unless another workflow's record holds them (that workflow's rerun
    may still replace its own result)."""
    return verdict.action != "keep" or record is None or by is None or record.workflow == by.workflow


def said(e: Entry, verdict: Verdict) -> str:
    """One ``file -> target`` line of the run's published event."""
    if verdict.action == "keep":
        return f"{e.rel} -> {e.target} (already there, identical)"
    if verdict.action == "replace":
        return f"{e.rel} -> {e.target} (replaced {verdict.why})"
    return f"{e.rel} -> {e.target}"


def refusals(refused: list[tuple[Entry, Verdict]], total: int) -> PublishError:
    """One error naming every refused file, and that nothing of the set was published."""
    parts = [f"publish {e.rel!r}: {e.target} already exists and {v.why}" for e, v in refused]
    hints = list(dict.fromkeys(v.hint for _, v in refused))
    whole = "" if total == 1 else f" (a step publishes all its files or none: none of its {total} was published)"
    return PublishError("; ".join(parts) + "; " + "; ".join(hints) + whole)
