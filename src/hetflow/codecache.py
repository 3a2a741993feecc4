"""Compiled dataclass methods kept between commands (issue 43).

``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__`` (and a frozen
class's ``__setattr__``/``__delattr__``, ``__hash__``) as source text and compiles it with
``exec`` when the class is made: about 800 compiles for the 160 dataclasses a ``hetflow
validate`` imports, a quarter of its time.  The text of each is the same at every command,
so ``kept_dataclass_code`` compiles it once: for the block it runs (``hetflow.cli.main``'s
command), the ``exec`` that the stdlib's ``dataclasses`` module calls is one that looks the
text up in a file of code objects (``$XDG_CACHE_HOME/hetflow/dataclass-code-MAGIC.marshal``,
the interpreter's bytecode magic in the name, as a ``.pyc`` has it) and compiles only what
the file lacks; a command that compiled anything writes the file again (whole or not at
all).  The text is the key, so a changed class compiles its new text; what runs is the code
Python would compile from that text (flags and file name the same).  The classes made are
the same classes: only the compile is skipped.

The file holds a SHA-256 of its contents, read before anything is unmarshalled (a torn or
damaged file is ignored, as a probe cache is).  ``HETFLOW_PROBE_CACHE=0`` turns it off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import marshal
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

from hetflow.probecache import OFF_ENV, cache_dir

KEEP = 4096  # texts kept in the file: past that, only the last command's are written
_DIGEST = 32  # sha256's bytes, at the file's start


class DataclassCode:
    """``exec`` for ``dataclasses``: a text's compiled code from ``kept``, else compiled now."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.kept = read_code(path)
        self.used: dict[str, CodeType] = {}
        self.compiled = 0

    def exec(self, source: Any, globals: Any = None, locals: Any = None) -> None:
        if not isinstance(source, str):  # only dataclasses calls it, with text: anything else as exec does
            exec(source, globals, locals)
            return
        code = self.kept.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)  # as exec compiles dataclasses' text
            self.compiled += 1
        self.used[source] = code
        exec(code, globals, locals)

    def save(self) -> None:
        """Write the file again when this command compiled a text it lacked."""
        if not self.compiled:
            return
        codes = self.kept | self.used if len(self.kept) + len(self.used) <= KEEP else self.used
        try:
            body = marshal.dumps(codes)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_name(f"{self.path.name}.{os.getpid()}")
            part.write_bytes(hashlib.sha256(body).digest() + body)
            part.replace(self.path)  # whole or not at all: two hetflows may write at once
        except (OSError, ValueError):
            pass


def code_path(env: Mapping[str, str] | None = None) -> Path:
    return cache_dir(env) / f"dataclass-code-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


def read_code(path: Path) -> dict[str, CodeType]:
    """The file's texts and code objects; {} when it is absent, damaged or not ours."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    digest, body = data[:_DIGEST], data[_DIGEST:]
    if len(digest) != _DIGEST or hashlib.sha256(body).digest() != digest:
        return {}
    try:
        codes = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {k: v for k, v in codes.items() if isinstance(k, str) and isinstance(v, CodeType)}


@contextlib.contextmanager
def kept_dataclass_code(env: Mapping[str, str] | None = None) -> Iterator[DataclassCode | None]:
    """For the block, the dataclasses made compile their methods through the kept file
    (``DataclassCode``); the stdlib's ``exec`` again after it.  Nested or turned off: as is."""
    env = os.environ if env is None else env
    if env.get(OFF_ENV, "1") in ("0", "no", "false") or "exec" in vars(dataclasses):
        yield None
        return
    code = DataclassCode(code_path(env))
    dataclasses.exec = code.exec  # type: ignore[attr-defined]  # found before the builtin by _create_fn
    try:
        yield code
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
        code.save()
