"""A task's file system: one host folder (``root``) mirrors the container paths the task
names, so the executors, run one after another, share them (TES: "each executor sees the
same mapped inputs and volumes").  Writable folders (volumes, the folders outputs are written
to, workdirs, stdout/stderr files' folders) are bound read-write, outermost only; an input
outside them is bound read-only, file by file (as Funnel's worker maps a task).

    layout        Layout: the mounts, and the host path of a container path
    stage_inputs  content written, file:// copied, s3:// downloaded (the server's ``s3:``)
    collect       outputs copied to their file:// or s3:// URLs (globs with path_prefix, TES 1.1)

s3:// goes through the data layer's object store (``s3_filesystem``: s3fs, the endpoint from
the service's config, credentials from the AWS variables); without one configured, an s3://
URL ends the task SYSTEM_ERROR saying so.
"""

from __future__ import annotations

import glob
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path

from hetflow.execute import Mount, ObjectStore
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


def _store(fs: ObjectStore | None, field: str, url: str) -> ObjectStore:
    if fs is None:
        raise StagingError(
            f"{field}: {url}: this server has no S3 endpoint configured (s3: in its --config), so s3:// cannot be used"
        )
    return fs


def _reason(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:300]


def _fetch_s3(fs: ObjectStore, url: str, dest: Path, *, directory: bool) -> int:
    """Download the object at ``url`` (every object under it for a directory); the files got."""
    key = url.removeprefix("s3://")
    if not directory:
        fs.get_file(key, str(dest))
        return 1
    prefix = key.rstrip("/")
    found = [k for k, v in fs.find(prefix, detail=True).items() if v.get("type", "file") == "file"]
    if not found:
        raise FileNotFoundError(f"no object under {url}")
    for k in found:
        target = dest / k[len(prefix) :].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(k, str(target))
    return len(found)


def stage_inputs(task: Task, lay: Layout, fs: ObjectStore | None = None) -> list[str]:
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
            store = _store(fs, f"inputs[{i}]", url)
            try:
                n = _fetch_s3(store, url, dest, directory=inp.type is FileType.DIRECTORY)
            except Exception as exc:  # botocore and aiohttp raise many kinds; all mean "cannot read it"
                raise StagingError(f"inputs[{i}]: cannot read {url}: {_reason(exc)}") from None
            said.append(f"input {inp.path}: {n} object(s) from {url}")
            continue
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


def collect(task: Task, lay: Layout, fs: ObjectStore | None = None) -> list[OutputFileLog]:
    """Copy each output to its URL; the files written (TES OutputFileLog)."""
    logs: list[OutputFileLog] = []
    for i, out in enumerate(task.outputs or []):
        store = _store(fs, f"outputs[{i}]", out.url) if out.url.startswith("s3://") else None
        if any(c in out.path for c in GLOB_CHARS):
            logs += _collect_glob(i, out, lay, store)
            continue
        source = lay.host(out.path)
        logs += _copy(i, out.path, source, out.url, store, directory=out.type is FileType.DIRECTORY)
    return logs


def _collect_glob(i: int, out: Output, lay: Layout, store: ObjectStore | None) -> list[OutputFileLog]:
    prefix = out.path_prefix or _fixed_part(out.path)
    logs: list[OutputFileLog] = []
    for match in sorted(glob.glob(str(lay.host(out.path)))):
        inside = "/" + str(Path(match).relative_to(lay.root))
        rel = inside[len(prefix) :].lstrip("/")
        url = out.url.rstrip("/") + "/" + rel
        logs += _copy(i, inside, Path(match), url, store, directory=Path(match).is_dir())
    return logs


def _copy(
    i: int, inside: str, source: Path, url: str, store: ObjectStore | None, *, directory: bool
) -> list[OutputFileLog]:
    """``source`` (a file, or a folder's files) to ``url``: a host path, or objects in S3."""
    if not source.exists():
        raise StagingError(f"outputs[{i}]: the executors left nothing at {inside}")
    if directory or source.is_dir():
        pairs = [(f, f"{url.rstrip('/')}/{f.relative_to(source)}", f"{inside}/{f.relative_to(source)}")
                 for f in sorted(source.rglob("*")) if f.is_file()]  # fmt: skip
    else:
        pairs = [(source, url, inside)]
    for f, to, _ in pairs:
        try:
            if store is not None:
                store.put_file(str(f), to.removeprefix("s3://"))
            else:
                host_path(to).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, host_path(to))
        except Exception as exc:  # OSError from the host; botocore's many kinds from S3
            raise StagingError(f"outputs[{i}]: cannot write {to}: {_reason(exc)}") from None
    return [OutputFileLog(url=to, path=path, size_bytes=str(f.stat().st_size)) for f, to, path in pairs]
