"""A task's file system: one host folder (``root``) mirrors the container paths the task
names, so the executors, run one after another, share them (TES: "each executor sees the
same mapped inputs and volumes").  Writable folders (volumes, the folders outputs are written
to, workdirs, stdout/stderr files' folders) are bound read-write, outermost only; an input
outside them is bound read-only, file by file (as Funnel's worker maps a task).

    layout        Layout: the mounts, and the host path of a container path
    stage_inputs  content written, file:// copied, s3:// refused unless configured
    collect       outputs copied to their file:// URLs (globs with path_prefix, TES 1.1)
"""

from __future__ import annotations

import glob
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path

from hetflow.execute import Mount
from hetflow.tes.messages import FileType, Output, OutputFileLog, Task
from hetflow.tes.service.accept import host_path

GLOB_CHARS = "*?["


class StagingError(Exception):
    """An input could not be fetched or an output not written: the task's SYSTEM_ERROR."""


@dataclass(frozen=True)
class Layout:
    root: Path
    writable: tuple[str, ...]  # container folders bound read-write, outermost only
    read_only: tuple[str, ...]  # container paths of inputs bound on their own

    def host(self, path: str) -> Path:
        return self.root / posixpath.normpath(path).lstrip("/")

    @property
    def mounts(self) -> tuple[Mount, ...]:
        binds = [Mount(str(self.host(d)), d, read_only=False) for d in self.writable]
        binds += [Mount(str(self.host(p)), p, read_only=True) for p in self.read_only]
        return tuple(sorted(binds, key=lambda m: m.target.count("/")))  # parents before children


def _fixed_part(path: str) -> str:
    """The folder of ``path`` above its first glob character."""
    cut = min((path.index(c) for c in GLOB_CHARS if c in path), default=len(path))
    return posixpath.dirname(path[:cut]) if cut < len(path) else path


def layout(task: Task, root: Path) -> Layout:
    wanted: set[str] = {posixpath.normpath(v) for v in task.volumes or []}
    for out in task.outputs or []:
        if any(c in out.path for c in GLOB_CHARS):
            wanted.add(posixpath.normpath(_fixed_part(out.path)))
        elif out.type is FileType.DIRECTORY:
            wanted.add(posixpath.normpath(out.path))
        else:
            wanted.add(posixpath.dirname(posixpath.normpath(out.path)))
    for ex in task.executors:
        if ex.workdir:
            wanted.add(posixpath.normpath(ex.workdir))
        for stream in (ex.stdout, ex.stderr):
            if stream:
                wanted.add(posixpath.dirname(posixpath.normpath(stream)))
    wanted.discard("/")
    outer = tuple(sorted(d for d in wanted if not any(_under(d, other) for other in wanted if other != d)))
    inputs = tuple(
        posixpath.normpath(i.path)
        for i in task.inputs or []
        if not any(_under(posixpath.normpath(i.path), d) for d in outer)
    )
    return Layout(root, outer, inputs)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def prepare(lay: Layout) -> None:
    for d in lay.writable:
        lay.host(d).mkdir(parents=True, exist_ok=True)


def stage_inputs(task: Task, lay: Layout) -> list[str]:
    """Put every input in place; what was done, for the system log."""
    said = []
    for i, inp in enumerate(task.inputs or []):
        dest = lay.host(inp.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if inp.content is not None:
            dest.write_text(inp.content, encoding="utf-8")
            said.append(f"input {inp.path}: {len(inp.content.encode())} bytes of content")
            continue
        url = inp.url or ""
        if url.startswith("s3://"):
            raise StagingError(
                f"inputs[{i}]: {url}: this server has no S3 endpoint configured, so s3:// cannot be fetched"
            )
        source = host_path(url)
        try:
            if inp.type is FileType.DIRECTORY:
                shutil.copytree(source, dest, dirs_exist_ok=True)
            else:
                shutil.copyfile(source, dest)
        except OSError as exc:
            raise StagingError(f"inputs[{i}]: cannot read {source}: {exc.strerror or exc}") from None
        said.append(f"input {inp.path}: copied from {source}")
    return said


def collect(task: Task, lay: Layout) -> list[OutputFileLog]:
    """Copy each output to its URL; the files written (TES OutputFileLog)."""
    logs: list[OutputFileLog] = []
    for i, out in enumerate(task.outputs or []):
        if out.url.startswith("s3://"):
            raise StagingError(f"outputs[{i}]: {out.url}: this server has no S3 endpoint configured")
        if any(c in out.path for c in GLOB_CHARS):
            logs += _collect_glob(i, out, lay)
            continue
        source = lay.host(out.path)
        dest = host_path(out.url)
        logs += _copy(i, out.path, source, dest, out.url, directory=out.type is FileType.DIRECTORY)
    return logs


def _collect_glob(i: int, out: Output, lay: Layout) -> list[OutputFileLog]:
    prefix = out.path_prefix or _fixed_part(out.path)
    logs: list[OutputFileLog] = []
    for match in sorted(glob.glob(str(lay.host(out.path)))):
        inside = "/" + str(Path(match).relative_to(lay.root))
        rel = inside[len(prefix) :].lstrip("/")
        url = out.url.rstrip("/") + "/" + rel
        logs += _copy(i, inside, Path(match), host_path(url), url, directory=Path(match).is_dir())
    return logs


def _copy(i: int, inside: str, source: Path, dest: Path, url: str, *, directory: bool) -> list[OutputFileLog]:
    if not source.exists():
        raise StagingError(f"outputs[{i}]: the executors left nothing at {inside}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if directory or source.is_dir():
            shutil.copytree(source, dest, dirs_exist_ok=True)
            return [
                OutputFileLog(
                    url=f"{url.rstrip('/')}/{f.relative_to(source)}",
                    path=f"{inside}/{f.relative_to(source)}",
                    size_bytes=str(f.stat().st_size),
                )
                for f in sorted(source.rglob("*"))
                if f.is_file()
            ]
        shutil.copyfile(source, dest)
    except OSError as exc:
        raise StagingError(f"outputs[{i}]: cannot write {dest}: {exc.strerror or exc}") from None
    return [OutputFileLog(url=url, path=inside, size_bytes=str(source.stat().st_size))]
