"""An anchor taken from git history: an old commit's modules, imported at bench time.

A benchmark that measures hetflow against itself as it was (bench/loader.py: the spec
loader before its fast path) reads the old code from the commit it names instead of
keeping a copy: ``git archive`` of the package's modules, unpacked into a temporary folder
as one package whose imports of each other (``from hetflow.spec.models import ...``) name
that package instead, and imported from there.  Everything else those modules import
(``hetflow.errors``, pydantic) is today's, as in the copy this replaced.

    with old_package("4aabbd9", "src/hetflow/spec", ("checks", "dag", "loader", "models", "units")) as spec:
        spec.loader.load_workflow(path)

A checkout without git, or without the commit (a shallow clone), gets an
``AnchorUnavailable`` that says which and what to do.
"""

from __future__ import annotations

import importlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


class AnchorUnavailable(RuntimeError):
    """The old code cannot be taken from git here; the message says why and what to do."""


def archived(commit: str, paths: Sequence[str], repo: Path = ROOT) -> dict[str, str]:
    """The text of each of ``paths`` as of ``commit``, by ``git archive``."""
    what = f"{', '.join(paths)} as of commit {commit}"
    try:
        r = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", commit, "--", *paths], capture_output=True
        )
    except FileNotFoundError:
        raise AnchorUnavailable(f"the anchor is {what}, taken from git: install git") from None
    if r.returncode != 0:
        said = r.stderr.decode(errors="replace").strip().splitlines()
        raise AnchorUnavailable(
            f"the anchor is {what}, and git cannot give it here ({said[-1] if said else f'exit {r.returncode}'}):"
            f" run from a clone of hetflow with its history (a shallow clone: git fetch --unshallow)"
        )
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        files = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        return {name: f.read().decode() for name, f in files.items() if f is not None}


def rewritten(text: str, old: str, new: str, modules: Sequence[str]) -> str:
    """``text`` with each ``from OLD.M import`` (M one of ``modules``) as ``from NEW.M import``;
    any other mention of ``OLD.`` left is an import of a module not taken: an error."""
    names = "|".join(re.escape(m) for m in modules)
    text = re.sub(rf"^(\s*)from {re.escape(old)}\.({names}) import ", rf"\1from {new}.\2 import ", text, flags=re.M)
    if re.search(rf"\b{re.escape(old)}\.", text):
        raise AnchorUnavailable(f"the old code imports a module of {old} that was not taken: add it to the modules")
    return text


@contextmanager
def old_package(commit: str, folder: str, modules: Sequence[str], repo: Path = ROOT) -> Iterator[ModuleType]:
    """``folder``'s ``modules`` (``src/hetflow/spec``; ``loader``, ...) as of ``commit``,
    imported as one package (``package.loader``) while the block runs; gone after it."""
    old = folder.removeprefix("src/").replace("/", ".")
    name = f"{old.replace('.', '_')}_at_{commit}"
    texts = archived(commit, [f"{folder}/{m}.py" for m in modules], repo)
    tmp = Path(tempfile.mkdtemp(prefix="hetflow-anchor-"))
    try:
        package = tmp / name
        package.mkdir()
        (package / "__init__.py").write_text(f'"""{folder} as of commit {commit} (bench/gitanchor.py)."""\n')
        for m in modules:
            (package / f"{m}.py").write_text(rewritten(texts[f"{folder}/{m}.py"], old, name, modules))
        sys.path.insert(0, str(tmp))
        try:
            pkg = importlib.import_module(name)
            for m in modules:
                importlib.import_module(f"{name}.{m}")
            yield pkg
        finally:
            sys.path.remove(str(tmp))
            for key in [k for k in sys.modules if k == name or k.startswith(f"{name}.")]:
                del sys.modules[key]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
