"""Answers of slow probes of this machine, kept between commands (issue 43).

``criu check`` (about 50-130 ms), ``podman image inspect`` and ``podman manifest exists``
(30-40 ms each) give the same answer until what they read changes; each answer is kept in
``$XDG_CACHE_HOME/hetflow/NAME.json`` (``~/.cache/hetflow``, as ``ociruntime``'s runtime
choice) under a key made of what it depends on: the binary's path, size and mtime, the
kernel, the image store's files' sizes and mtimes (``stamp``).  A change to any of them makes
a new key, so the probe runs again; the last ``KEEP`` keys of each file are kept.
The pydantic plugins installed are kept the same way (``PydanticPluginTable``), under a key
made of ``sys.path``'s folders.  ``HETFLOW_PROBE_CACHE=0`` turns it off (every command probes,
as before).  A cache that cannot be read or written costs a probe, nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

OFF_ENV = "HETFLOW_PROBE_CACHE"
KEEP = 64  # keys per file: a machine's few binaries and images, each in its few states


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "hetflow"


def stamp(paths: Iterable[str | Path | None]) -> str:
    """What the files at ``paths`` are now: path, size and mtime of each ('-' where absent)."""
    parts = []
    for path in paths:
        try:
            st = os.stat(path) if path else None
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}" if st else f"{path}:-")
        except OSError:
            parts.append(f"{path}:-")
    return "\0".join(parts)


def remembered(name: str, key: str, probe: Callable[[], Any], env: Mapping[str, str] | None = None) -> Any:
    """``probe()``'s answer (JSON: a dict, list, str, number or None) for ``key``, from the
    cache file ``name`` when it holds one, else probed now and kept."""
    env = os.environ if env is None else env
    if env.get(OFF_ENV, "1") in ("0", "no", "false"):
        return probe()
    digest = hashlib.sha256(key.encode()).hexdigest()
    path = cache_dir(env) / f"{name}.json"
    kept = _read(path)
    if digest in kept:
        return kept[digest]
    answer = probe()
    kept.pop(digest, None)
    kept = dict(list(kept.items())[-(KEEP - 1) :])
    kept[digest] = answer
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}")
        part.write_text(json.dumps(kept), encoding="utf-8")
        part.replace(path)  # whole or not at all: two hetflows may probe at once
    except (OSError, TypeError, ValueError):
        pass
    return answer


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


SYSTEM_STORAGE_CONFS = ("/etc/containers/storage.conf", "/usr/share/containers/storage.conf")
ROOT_GRAPHROOT = "/var/lib/containers/storage"
REGISTRIES_CONF = "/etc/containers/registries.conf"


def image_store_stamp(binary: str, env: Mapping[str, str]) -> str | None:
    """What podman's answers about local images depend on, for root's podman: the binary,
    its containers.conf, storage.conf and registries.conf (short names), and the image store's
    list (``graphroot/DRIVER-images/images.json``, rewritten on every pull, build, tag, rm
    or manifest change, and its ``images.lock``).  None where that list cannot be found
    (rootless podman, a storage.conf that cannot be read): then nothing is cached."""
    if os.geteuid() != 0 or env.get("CONTAINERS_STORAGE_CONF") or Path(binary).name != "podman":
        return None
    conf = next((c for c in SYSTEM_STORAGE_CONFS if os.path.isfile(c)), None)
    graphroot, driver = ROOT_GRAPHROOT, ""
    if conf is not None:
        try:
            import tomllib

            storage = tomllib.loads(Path(conf).read_text(encoding="utf-8")).get("storage", {})
            graphroot = str(storage.get("graphroot") or graphroot)
            driver = str(storage.get("driver") or "")
        except (OSError, ValueError, AttributeError):
            return None
    lists = sorted(Path(graphroot).glob(f"{driver or '*'}-images/images.json"))
    if len(lists) != 1:
        return None  # no image yet, or two drivers' stores: ask podman
    images = lists[0]
    files = [binary, env.get("CONTAINERS_CONF"), conf, REGISTRIES_CONF, images, images.with_name("images.lock")]
    return stamp(files)


def image_fact(binary: str, env: Mapping[str, str], what: str, name: str, probe: Callable[[], Any]) -> Any:
    """``probe()``'s answer about local image ``name`` (``what``: exists, id, image...), kept
    while podman's image store is unchanged (``image_store_stamp``)."""
    store = image_store_stamp(binary, env)
    return probe() if store is None else remembered("podman-images", f"{store}\0{what}\0{name}", probe, env)


PYDANTIC_LOADER = "pydantic.plugin._loader"  # pydantic's plugin discovery (pydantic 2.5 and later)


def pydantic_plugins() -> list[str]:
    """The pydantic plugins installed where this interpreter imports from (the ``pydantic``
    entry points, as pydantic looks them up), kept while no folder of ``sys.path`` changes:
    installing or removing a distribution adds or removes its ``.dist-info`` folder."""

    def probe() -> list[str]:
        from importlib.metadata import entry_points

        return sorted({ep.value for ep in entry_points(group="pydantic")})

    return list(remembered("pydantic-plugins", stamp(sys.path), probe))


class PydanticPluginTable:
    """Fills pydantic's plugin table, when its module is first imported, with the answer
    ``pydantic_plugins`` keeps, where that answer is "none": pydantic would otherwise read
    every installed distribution's entry points at the first model it builds (191 files
    here: 15-40 ms of a ``validate`` on a quiet machine, ten times that on a busy disk) to
    find the same nothing.  Where plugins are installed pydantic loads them itself, as before.
    ``install`` puts it on ``sys.meta_path`` once (a finder by its ``find_spec``: importlib.abc
    would import importlib.resources, 20 ms); it leaves after that one import."""

    @classmethod
    def install(cls) -> None:
        if PYDANTIC_LOADER not in sys.modules and not any(isinstance(f, cls) for f in sys.meta_path):
            sys.meta_path.insert(0, cls())

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != PYDANTIC_LOADER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            none = not pydantic_plugins()
            with metadata_on_first_use() if none else contextlib.nullcontext():
                run(module)
            if getattr(module, "_plugins", False) is None and none:
                setattr(module, "_plugins", {})  # noqa: B010 -- what pydantic's own look-up leaves when it finds none

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


METADATA = "importlib.metadata"


@contextlib.contextmanager
def metadata_on_first_use() -> Iterator[None]:
    """For the block (pydantic's plugin loader being imported), ``importlib.metadata`` is a
    stand-in whose names import the real module when first called or read: the loader's
    ``from importlib.metadata import entry_points`` gets a function that does, and with the
    table filled (no plugin) it is never called, so no command pays for importing the real
    module (email, zipfile, csv: 10-20 ms of ``validate``).  Nothing changes where it was
    already imported."""
    if METADATA in sys.modules:
        yield
        return
    stand_in = ModuleType(METADATA)

    def real() -> ModuleType:
        return importlib.import_module(METADATA)  # the stand-in is gone by the time this runs

    def entry_points(**params: Any) -> Any:
        return real().entry_points(**params)

    def other(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(real(), name)

    stand_in.entry_points = entry_points  # type: ignore[attr-defined]
    stand_in.__getattr__ = other  # type: ignore[method-assign]
    sys.modules[METADATA] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(METADATA) is stand_in:
            del sys.modules[METADATA]
