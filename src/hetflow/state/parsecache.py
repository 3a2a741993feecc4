"""Big workflows parsed once, kept by content under ``HETFLOW_HOME/cache/specs``.

``hetflow.spec`` parses a workflow file and reads nothing but the files it names; keeping
the parse between commands (a ``run`` after a ``plan`` of the same 10,000-step file) is
state kept under HETFLOW_HOME, so it lives here, beside the store.  A kept parse is a
pickle of the ``LoadedWorkflow``, read back only when the text, path, params, includes and
the spec package's own source are all the same (like Python's ``.pyc``).

The spec names are imported inside the functions: ``hetflow.state`` is imported by
``hetflow ps``, which must not pay for loading the workflow models.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hetflow.config import hetflow_home

if TYPE_CHECKING:
    from hetflow.spec import LoadedWorkflow, Origin

PARSE_CACHE_MIN_BYTES = 256 * 1024  # about 1,000 steps: below that, parsing is quicker than the cache
PARSE_CACHE_MIN_STEPS = 1000  # a smaller file whose fan-outs expand to this many steps is kept too
NO_PARSE_CACHE_ENV = "HETFLOW_NO_PARSE_CACHE"  # set (to anything): always parse (bench/local/loader.py's cold figures)
_KEEP = 32


def load_workflow_cached(
    path: str | Path,
    overrides: Mapping[str, object] | None = None,
    base: Path | None = None,
    *,
    home: Path | None = None,
    includes: Mapping[str, str] | None = None,
    origins: Mapping[str, Origin] | None = None,
) -> LoadedWorkflow:
    """``hetflow.spec.load_workflow``, with files of ``PARSE_CACHE_MIN_BYTES`` or more, and
    smaller ones that expand to ``PARSE_CACHE_MIN_STEPS`` steps or more (``matrix``, ``range``:
    a few lines, thousands of steps), kept parsed under ``home`` (default ``hetflow_home()``)
    and read back when nothing changed.
    ``includes``: a run's recorded include texts (``LoadedWorkflow.includes``), read instead
    of the files; such a parse is not kept (its key would be the files').
    ``origins``: where each override was written (``hetflow.spec.Origin``; default ``-p``)."""
    from hetflow.spec import parse_workflow, read_yaml_text

    p = Path(path)
    text = read_yaml_text(p, "a workflow YAML")
    base = base or p.resolve().parent
    if includes:
        return parse_workflow(text, str(p), overrides, base=base, includes=includes, origins=origins)
    if os.environ.get(NO_PARSE_CACHE_ENV):
        return parse_workflow(text, str(p), overrides, base=base, origins=origins)
    folder = (home or hetflow_home()) / "cache" / "specs"
    return _load_kept(text, str(p), overrides, base, folder, origins or {}, big=len(text) >= PARSE_CACHE_MIN_BYTES)


@functools.cache
def _spec_digest() -> str:
    """The spec package's own source, its sub-packages' too: a parse kept by another hetflow
    is not reused."""
    import hetflow.spec

    h = hashlib.sha256()
    folder = Path(hetflow.spec.__file__).parent
    for f in sorted(folder.rglob("*.py")):
        h.update(f.relative_to(folder).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _load_kept(
    text: str,
    file: str,
    overrides: Mapping[str, object] | None,
    base: Path,
    folder: Path,
    origins: Mapping[str, Origin],
    *,
    big: bool,
) -> LoadedWorkflow:
    """The parse kept in ``folder`` for this text, path, params and includes, else a fresh
    parse that is then kept if the text is ``big`` or it has ``PARSE_CACHE_MIN_STEPS`` steps
    (a small file without a kept copy costs a hash of its text and a failed open).  Anything
    wrong with the kept copy means a parse; a failed parse is never kept."""
    from hetflow.lazy import no_cyclic_gc
    from hetflow.spec import LoadedWorkflow, parse_workflow

    key = hashlib.sha256(
        json.dumps(
            [
                _spec_digest(),
                file,
                str(base),
                sorted((overrides or {}).items(), key=str),
                # a settings file's param the workflow lacks is a note, -p's an error: not the same parse
                sorted((k, o.file, o.line, o.part, o.optional) for k, o in origins.items()),
                text,
            ]
        ).encode()
    ).hexdigest()
    kept = folder / f"{key}.pickle"
    try:
        with kept.open("rb") as f, no_cyclic_gc():
            includes, loaded = pickle.load(f)
        if all(_digest_of(Path(i)) == d for i, d in includes) and isinstance(loaded, LoadedWorkflow):
            return loaded
    except (OSError, pickle.PickleError, EOFError, ValueError, TypeError, AttributeError):
        pass
    loaded = parse_workflow(text, file, overrides, base=base, origins=origins)
    if not big and len(loaded.workflow.steps) < PARSE_CACHE_MIN_STEPS:
        return loaded
    includes = [(i, _digest_of(Path(i))) for i in loaded.workflow.include]
    with contextlib.suppress(OSError, pickle.PickleError):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_suffix(f".tmp{os.getpid()}")
        with tmp.open("wb") as f:
            pickle.dump((includes, loaded), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, kept)
        for old in sorted(folder.glob("*.pickle"), key=lambda q: q.stat().st_mtime)[:-_KEEP]:
            old.unlink(missing_ok=True)
    return loaded


def _digest_of(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""
