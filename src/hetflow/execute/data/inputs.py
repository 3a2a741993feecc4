"""Workflow data in: resolve each ``data:`` entry once, when a run is submitted.

Host data (a file, a directory, a glob) is listed and content-hashed where it is; steps
mount it read-only from there, so on Slurm and Ray it must sit on a file system every node
shares (as a Slurm user's home or project directory does).  S3 data is listed when the run
is submitted (an unreadable bucket is refused before anything is recorded) and downloaded
once into the run's work directory, which multi-node backends already require to be
shared; steps mount the downloaded copy.

The result is a ``DataManifest``, stored with the run's plan: every file with its sha256
(the cache key reads it) and where a step mounts it from.  Hashes of host files are
remembered per (path, device, inode, size, mtime, ctime), so an unchanged file is not read
again and a file rewritten in place is, even with its old mtime put back (ctime moves).
"""

from __future__ import annotations

import glob
import hashlib
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hetflow.errors import HetflowError, Problem, SpecError
from hetflow.execute.data.fanlist import read_lines
from hetflow.spec import DATA_PREFIX, DataSet, LoadedWorkflow, file_items

FILE, DIR, GLOB, S3 = "file", "dir", "glob", "s3"


@dataclass(frozen=True)
class DataFile:
    rel: str  # path under the data set (a file data set: its name)
    source: str  # host path it is mounted from (S3: where it is downloaded to)
    sha256: str
    size: int
    url: str = ""  # S3: the object's URL


@dataclass(frozen=True)
class DataSetFiles:
    name: str
    kind: str  # file | dir | glob | s3
    root: str  # the host directory (dir), the file (file), the glob's fixed prefix, or (s3) the download directory
    files: tuple[DataFile, ...]

    def digest(self, rel: str = "") -> str:
        """The content digest of the whole set, or of one path (a file or a directory) in it."""
        chosen = [f for f in self.files if not rel or f.rel == rel or f.rel.startswith(rel.rstrip("/") + "/")]
        h = hashlib.sha256()
        for f in sorted(chosen, key=lambda f: f.rel):
            h.update(f"{f.rel} {f.sha256}\n".encode())
        return h.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "root": self.root,
            "files": [[f.rel, f.source, f.sha256, f.size, f.url] for f in self.files],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DataSetFiles:
        files = tuple(DataFile(r, s, h, int(n), u) for r, s, h, n, u in d["files"])
        return cls(str(d["name"]), str(d["kind"]), str(d["root"]), files)


@dataclass(frozen=True)
class DataManifest:
    sets: Mapping[str, DataSetFiles] = field(default_factory=dict)

    def lookup(self, ref: str) -> tuple[DataSetFiles, str]:
        """``data.NAME[/REL]`` -> (the set, REL)."""
        name, _, rel = ref.removeprefix(DATA_PREFIX).partition("/")
        return self.sets[name], posixpath.normpath(rel) if rel else ""

    def digest(self, ref: str) -> str:
        ds, rel = self.lookup(ref)
        return ds.digest(rel)

    def to_dict(self) -> dict[str, Any]:
        return {n: s.to_dict() for n, s in self.sets.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> DataManifest:
        return cls({n: DataSetFiles.from_dict(s) for n, s in (d or {}).items()})


class HashMemo(Protocol):
    """Remembered sha256s of host files (the state store keeps them)."""

    def file_hash(self, key: str) -> str | None: ...

    def remember_hash(self, key: str, sha256: str) -> None: ...


class NoMemo:
    def file_hash(self, key: str) -> str | None:
        return None

    def remember_hash(self, key: str, sha256: str) -> None:
        pass


class _Unhashed:
    """For listing only (``hetflow plan``): no file is read."""

    def file_hash(self, key: str) -> str | None:
        return ""

    def remember_hash(self, key: str, sha256: str) -> None:
        pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hashed(path: Path, memo: HashMemo) -> tuple[str, int]:
    st = path.stat()
    key = f"{path}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    known = memo.file_hash(key)
    if known is None:
        known = sha256_file(path)
        memo.remember_hash(key, known)
    return known, st.st_size


# --- resolution ------------------------------------------------------------------------


@dataclass(frozen=True)
class Located:
    """Where a problem with a data entry is reported."""

    file: str
    line_of: Callable[[tuple[str | int, ...]], int]

    def problem(self, name: str, message: str) -> Problem:
        return Problem(self.file, self.line_of(("data", name)), f"data {name!r}: {message}")


def resolve_host(name: str, ds: DataSet, memo: HashMemo, where: Located, *, hash_files: bool = True) -> DataSetFiles:
    """List a host data entry (and hash its files, unless only the list is wanted)."""
    if not hash_files:
        memo = _Unhashed()
    assert ds.path is not None
    path = ds.path
    if glob.has_magic(path):
        matches = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        fixed = _fixed_prefix(path)
        if not matches:
            raise SpecError(
                [
                    where.problem(
                        name,
                        f"the pattern {Path(path).name!r} matched no file in {fixed}; check the pattern and the "
                        "directory (relative paths are read from the workflow file's directory)",
                    )
                ]
            )
        files = []
        for m in matches:
            sha, size = hashed(Path(m), memo)
            files.append(DataFile(os.path.relpath(m, fixed), m, sha, size))
        _unique_names(name, files, where)
        return DataSetFiles(name, GLOB, fixed, tuple(files))
    p = Path(path)
    if p.is_file():
        sha, size = hashed(p, memo)
        return DataSetFiles(name, FILE, str(p), (DataFile(p.name, str(p), sha, size),))
    if p.is_dir():
        files = []
        for q in sorted(x for x in p.rglob("*") if x.is_file()):
            sha, size = hashed(q, memo)
            files.append(DataFile(q.relative_to(p).as_posix(), str(q), sha, size))
        return DataSetFiles(name, DIR, str(p), tuple(files))
    if p.exists():
        raise SpecError([where.problem(name, f"{p} is neither a file nor a directory")])
    raise SpecError(
        [
            where.problem(
                name,
                f"no such file or directory {p.name!r} in {p.parent}; give an existing path "
                "(relative paths are read from the workflow file's directory)",
            )
        ]
    )


def _fixed_prefix(pattern: str) -> str:
    """The directory part of a glob before its first wildcard: where the pattern is searched."""
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    head = Path(*fixed) if fixed else Path(".")
    return str(head if len(fixed) < len(parts) else head.parent)


def _unique_names(name: str, files: list[DataFile], where: Located) -> None:
    seen: dict[str, str] = {}
    for f in files:
        if f.rel in seen:
            raise SpecError([where.problem(name, f"two files map to {f.rel!r}: {seen[f.rel]} and {f.source}")])
        seen[f.rel] = f.source


class ObjectStore(Protocol):
    """What S3 data needs (an fsspec file system; ``s3fs.S3FileSystem`` in production)."""

    def find(self, path: str, detail: bool = ...) -> Any: ...

    def info(self, path: str) -> Any: ...

    def get_file(self, rpath: str, lpath: str) -> Any: ...

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> Any: ...  # kwargs: s3fs's mode, PutObject's

    def exists(self, path: str) -> bool: ...

    def copy(self, path1: str, path2: str) -> Any: ...  # a server-side copy (publish keeps what it replaces)

    def rm_file(self, path: str) -> Any: ...


def s3_filesystem(endpoint: str | None) -> ObjectStore:
    """An s3fs file system; credentials and region from the usual AWS variables and files,
    the endpoint from ``endpoint`` or AWS_ENDPOINT_URL."""
    try:
        import s3fs
    except ImportError:
        raise HetflowError("S3 data needs s3fs: pip install 's3fs' (or 'hetflow[s3]')") from None
    url = endpoint or os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("HETFLOW_S3_ENDPOINT")
    kwargs: dict[str, Any] = {"skip_instance_cache": True}
    if url:
        kwargs["client_kwargs"] = {"endpoint_url": url}
    fs: ObjectStore = s3fs.S3FileSystem(**kwargs)
    return fs


def list_s3(name: str, ds: DataSet, fs: ObjectStore, where: Located) -> list[tuple[str, str, int]]:
    """The objects under the URL as (rel, key, size); refuses an unreadable or empty prefix."""
    assert ds.url is not None
    path = ds.url.removeprefix("s3://")
    try:
        found = fs.find(path, detail=True)
    except Exception as exc:  # botocore and aiohttp raise many kinds; all mean "cannot read it"
        raise SpecError([where.problem(name, f"cannot list {ds.url}: {_s3_reason(exc)}")]) from None
    objects = [(k, int(v.get("size") or 0)) for k, v in found.items() if v.get("type", "file") == "file"]
    if not objects:
        raise SpecError(
            [where.problem(name, f"{ds.url} holds no object; check the bucket and prefix (and the endpoint)")]
        )
    prefix = path.rstrip("/")
    out = []
    for key, size in sorted(objects):
        rel = posixpath.basename(key) if key == prefix else key[len(prefix) :].lstrip("/")
        out.append((rel, key, size))
    return out


def _s3_reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:300]


def fetch_s3(
    name: str, ds: DataSet, listing: Iterable[tuple[str, str, int]], fs: ObjectStore, into: Path, where: Located
) -> DataSetFiles:
    """Download the listed objects under ``into`` and hash them."""
    assert ds.url is not None
    files = []
    for rel, key, _size in listing:
        target = into / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fs.get_file(key, str(target))
        except Exception as exc:
            raise SpecError([where.problem(name, f"cannot download s3://{key}: {_s3_reason(exc)}")]) from None
        os.chmod(target, 0o644)
        files.append(DataFile(rel, str(target), sha256_file(target), target.stat().st_size, f"s3://{key}"))
    return DataSetFiles(name, S3, str(into), tuple(files))


@dataclass
class DataPlan:
    """Host data resolved, S3 data listed (downloaded by ``fetch``, once the run's directory exists)."""

    host: dict[str, DataSetFiles]
    s3: dict[str, list[tuple[str, str, int]]]
    filesystems: dict[str, ObjectStore]

    def fetch(self, loaded: LoadedWorkflow, into: Path) -> DataManifest:
        where = Located(loaded.file, lambda loc: loaded.line(*loc))
        sets = dict(self.host)
        for name, listing in self.s3.items():
            sets[name] = fetch_s3(name, loaded.workflow.data[name], listing, self.filesystems[name], into / name, where)
        return DataManifest({n: sets[n] for n in loaded.workflow.data})

    def listed(self) -> DataManifest:
        """The workflow data as a run would see it, without downloading: host data hashed, S3
        objects listed (their content unknown: hashed once downloaded)."""
        sets: dict[str, DataSetFiles] = dict(self.host)
        for name, listing in self.s3.items():
            files = tuple(DataFile(rel, "", "", size, url) for rel, url, size in listing)
            sets[name] = DataSetFiles(name, S3, "", files)
        return DataManifest(sets)


def resolve_data(
    loaded: LoadedWorkflow,
    memo: HashMemo | None = None,
    s3: Callable[[str | None], ObjectStore] = s3_filesystem,
) -> DataPlan:
    """Check and list every data entry; every problem is reported at once."""
    where = Located(loaded.file, lambda loc: loaded.line(*loc))
    host: dict[str, DataSetFiles] = {}
    s3_lists: dict[str, list[tuple[str, str, int]]] = {}
    filesystems: dict[str, ObjectStore] = {}
    problems: list[Problem] = []
    for name, ds in loaded.workflow.data.items():
        try:
            if ds.is_s3:
                fs = s3(ds.endpoint)
                filesystems[name] = fs
                s3_lists[name] = list_s3(name, ds, fs, where)
            else:
                host[name] = resolve_host(name, ds, memo or NoMemo(), where)
        except SpecError as exc:
            problems += exc.problems
        except HetflowError as exc:
            problems.append(where.problem(name, str(exc)))
    if problems:
        raise SpecError(problems)
    return DataPlan(host, s3_lists, filesystems)


def data_items(manifest: DataManifest, kind: str, ref: str) -> list[Any]:
    """The items of ``foreach: {files|lines: data.NAME[/REL]}``."""
    ds, rel = manifest.lookup(ref)
    chosen = [f for f in ds.files if not rel or f.rel == rel or f.rel.startswith(rel.rstrip("/") + "/")]
    if kind == "files":
        base = f"{DATA_PREFIX}{ds.name}"
        return file_items(base, [f.rel for f in chosen])
    if len(chosen) != 1:
        raise HetflowError(f"foreach lines of {ref!r}: it holds {len(chosen)} files; name one file (data.NAME/FILE)")
    return read_lines(Path(chosen[0].source), ref)  # counted as read: no more than the fan-out limit + 1
