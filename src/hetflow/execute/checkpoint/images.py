"""A step's CRIU images in the run's folder (``RunPaths.checkpoints``), kept across attempts.

Per attempt, the last good checkpoint only: ``ATTEMPT.ID.tar`` (podman's export of the CRIU
dump), ``ATTEMPT.ID.out/`` (the attempt's ``/out`` at the dumped moment: copied while the
container is frozen for a periodic dump (``freeze``), after a dump that stopped it, so a
restored process finds its outputs as it left them, not as a later, lost, moment left them)
and ``ATTEMPT.json`` (when, how big, how long, which container, and which ID's pair).  Each
dump's pair has names of its own (ID, random); rewriting ``ATTEMPT.json`` (written beside it,
then renamed) is the commit point, and only then is the older pair removed: a crash at any
moment leaves the JSON naming one whole pair, never a new image with older outputs (which
CRIU would refuse to restore, or restore against files a later moment wrote).
``restored-ATTEMPT.json`` says which checkpoint an attempt was restored from (``hetflow
logs`` prints the older attempt's lines up to that moment before the restored ones).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hetflow.execute.checkpoint.freeze import copy_outputs
from hetflow.execute.data.paths import RunPaths


@dataclass(frozen=True)
class Saved:
    """One attempt's last good checkpoint."""

    step: str
    attempt: int
    container: str
    taken: float  # epoch seconds when the dump ended
    size: int  # bytes of the image
    seconds: float  # how long the dump took (the step was paused that long)
    image: str
    outputs: str  # the attempt's /out at that moment
    staging: str  # where that attempt's /out was (a restore moves the mount to the new one)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.taken))
        size = _size(self.size)
        said = f"checkpoint {self.step} attempt {self.attempt}: {when}, {size}, dumped in {self.seconds:.2f}s"
        return f"{said}: {Path(self.image).name}"


@dataclass(frozen=True)
class Restore:
    """What a new attempt is restored from (``Job.restore``)."""

    image: str
    outputs: str
    staging_was: str
    from_attempt: int
    taken: float


class CheckpointImages:
    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths

    def folder(self, step: str) -> Path:
        return self.paths.checkpoints(step)

    def part(self, step: str, attempt: int) -> Path:
        """Where a dump is written before it is known good."""
        folder = self.folder(step)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{attempt}.tar.part.{secrets.token_hex(4)}"  # one per dump: two never share one

    def outputs_part(self, step: str, attempt: int) -> tuple[Path, Path]:
        """(the attempt's /out, where a dump's copy of it goes): a periodic dump copies it
        while the container is frozen (``freeze.frozen_dump``) and hands it to ``commit``."""
        part = self.folder(step) / f"{attempt}.out.part.{secrets.token_hex(4)}"
        return self.paths.staging(step, attempt), part

    def commit(
        self, step: str, attempt: int, container: str, part: Path, seconds: float, outputs: Path | None = None
    ) -> Saved:
        """Make a finished dump the attempt's checkpoint, with ``outputs`` (the copy of /out
        taken with the dump) or, for a dump that stopped the container, /out as it is now."""
        staging = self.paths.staging(step, attempt)
        folder = self.folder(step)
        pair = f"{attempt}.{secrets.token_hex(4)}"
        image, out = folder / f"{pair}.tar", folder / f"{pair}.out"
        if outputs is not None and outputs.is_dir():
            outputs.replace(out)
        else:
            copy_outputs(staging, out)
        taken = time.time()
        part.replace(image)
        saved = Saved(
            step, attempt, container, taken, image.stat().st_size, seconds, str(image), str(out), str(staging)
        )
        with _locked(folder / f"{attempt}.lock"):  # two dumps of one attempt (periodic, stop) commit in turn
            write_json(folder / f"{attempt}.json", asdict(saved))  # the commit point
            self._drop_older(folder, attempt, keep=(image.name, out.name))
        return saved

    @staticmethod
    def _drop_older(folder: Path, attempt: int, keep: tuple[str, ...]) -> None:
        """The attempt's older pairs (and any a crash left unnamed); dumps in progress stay."""
        for p in folder.glob(f"{attempt}.*"):
            if p.name not in keep and ".part." not in p.name and _dumped(p.name):
                _remove(p)

    def saved(self, step: str, attempt: int) -> Saved | None:
        data = _read_json(self.folder(step) / f"{attempt}.json")
        if data is None:
            return None
        try:
            found = Saved(**data)
        except TypeError:
            return None
        return found if Path(found.image).is_file() else None

    def latest(self, step: str, before: int | None = None) -> Saved | None:
        """The newest checkpoint of an attempt of ``step`` before attempt ``before``."""
        folder = self.folder(step)
        if not folder.is_dir():
            return None
        found = []
        for meta in folder.glob("*.json"):
            if meta.stem.isdigit() and (before is None or int(meta.stem) < before):
                s = self.saved(step, int(meta.stem))
                if s is not None:
                    found.append(s)
        return max(found, key=lambda s: s.taken, default=None)

    def kept(self) -> list[Saved]:
        """Every step's checkpoints still kept (one per attempt), oldest first."""
        root = self.paths.workdir / "checkpoints"
        steps = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        found = [s for step in steps for m in self.folder(step).glob("*.json") if (s := self._meta(step, m))]
        return sorted(found, key=lambda s: s.taken)

    def _meta(self, step: str, meta: Path) -> Saved | None:
        return self.saved(step, int(meta.stem)) if meta.stem.isdigit() else None

    def restore_point(self, saved: Saved) -> Restore:
        return Restore(saved.image, saved.outputs, saved.staging, saved.attempt, saved.taken)

    def note_restored(self, step: str, attempt: int, r: Restore) -> None:
        write_json(self.folder(step) / f"restored-{attempt}.json", {"from_attempt": r.from_attempt, "taken": r.taken})

    def restored_from(self, step: str, attempt: int) -> tuple[int, float] | None:
        """(attempt, time) of the checkpoint ``attempt`` was restored from, if it was."""
        data = _read_json(self.folder(step) / f"restored-{attempt}.json")
        if data is None:
            return None
        return int(data["from_attempt"]), float(data["taken"])

    def drop_images(self, step: str) -> int:
        """Remove the step's images and output copies (it succeeded: nothing to restore),
        keeping the small records; returns the bytes freed."""
        folder, freed = self.folder(step), 0
        if not folder.is_dir():
            return 0
        for p in folder.iterdir():
            if _dumped(p.name):
                freed += _remove(p)
        return freed


def kept_checkpoints(workdir: str) -> list[Saved]:
    """The checkpoints a run keeps (``hetflow show``)."""
    return CheckpointImages(RunPaths(Path(workdir))).kept()


def _dumped(name: str) -> bool:
    """An image or outputs copy (``N.ID.tar``, ``N.ID.out``), or a dump's part of one."""
    return name.endswith((".tar", ".out")) or ".tar.part." in name or ".out.part." in name


def _remove(p: Path) -> int:
    """Remove an image (returns its bytes) or an outputs copy (a folder: 0)."""
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
        return 0
    with contextlib.suppress(OSError):
        size = p.stat().st_size
        p.unlink()
        return size
    return 0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_json(path: Path, data: object) -> None:
    """``data`` as JSON at ``path``, whole or not at all (written beside it, then renamed)."""
    part = path.with_name(f"{path.name}.{os.getpid()}")
    part.write_text(json.dumps(data), encoding="utf-8")
    part.replace(path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _size(n: int) -> str:
    from hetflow.spec import format_bytes

    return format_bytes(n)
