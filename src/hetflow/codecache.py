"""What Python compiles at every command, compiled once and kept between commands (issue 43).

Three compiles are the same at every command, and a ``hetflow validate`` paid a third of
its time for them:

- ``@dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__`` (and a frozen
  class's ``__setattr__``/``__delattr__``, ``__hash__``) as source text and compiles it with
  ``exec`` when the class is made: about 800 compiles for the 160 dataclasses a ``validate``
  imports, a quarter of its time.  ``DataclassCode`` is the ``exec`` the stdlib's
  ``dataclasses`` module calls for the block: the text's code object from the file, compiled
  only where the file lacks it (flags and file name as ``exec`` compiles them).
- ``typing.ForwardRef`` compiles each string annotation it is made from (``ForwardRefCode``;
  pydantic makes them for its models' fields, hetflow's modules use ``from __future__ import
  annotations``): some 900 small compiles, about 15 ms of the models' imports.
- ``re.compile`` parses each pattern and translates it to the regex engine's code in
  Python (``re._parser``, ``re._compiler``): about 120 patterns (yaml's, rich's, email's,
  hetflow's), 5-8% of a command.  ``RegexCode`` keeps that translation (the engine's code
  list, flags, groups) per pattern and flags, from the second command that compiles it on,
  and makes the pattern from it with the same call the stdlib ends with (``_sre.compile``):
  the same object (``==`` to the stdlib's).

For the block ``kept_compiles`` runs (``hetflow.cli.main``'s command), each looks its key
up in a file under the probe cache's folder (``$XDG_CACHE_HOME/hetflow/NAME-MAGIC.marshal``,
the interpreter's bytecode magic in the name, as a ``.pyc`` has it), and a command that
compiled anything new writes its file again (whole or not at all).  The key is the source
text (the pattern and flags), so a changed class or pattern compiles anew.  A file holds a
SHA-256 of its contents, checked before anything is unmarshalled: a torn or damaged file is
ignored, as a probe cache is; so is one that is not the user's own (code objects are run).
``HETFLOW_PROBE_CACHE=0`` turns them off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import marshal
import os
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

from hetflow.probecache import OFF_ENV, cache_dir

KEEP = 4096  # entries kept in a file: past that, only the last command's are written
_DIGEST = 32  # sha256's bytes, at the file's start
_re_compiler: Any = getattr(re, "_compiler", None)  # the stdlib's, where this Python has it
_re_parser: Any = getattr(re, "_parser", None)
_COMMAND = re.compile(r"[a-z][a-z0-9-]{0,23}")  # a command's name, as a file name's part


class KeptFile:
    """One file of compiled things: ``kept`` (read), ``used`` (by this command), saved
    again when this command made one the file lacked."""

    def __init__(self, path: Path, valid: Callable[[Any, Any], bool]) -> None:
        self.path = path
        self.kept = read_kept(path, valid)
        self.used: dict[Any, Any] = {}
        self.made = 0

    def save(self) -> None:
        if not self.made:
            return
        kept = self.kept | self.used if len(self.kept) + len(self.used) <= KEEP else self.used
        try:
            body = marshal.dumps(kept)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            part = self.path.with_name(f"{self.path.name}.{os.getpid()}")
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # code: the owner's only
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(body).digest() + body)
            part.replace(self.path)  # whole or not at all: two hetflows may write at once
        except (OSError, ValueError):
            pass


class DataclassCode(KeptFile):
    """``exec`` for ``dataclasses``: a text's compiled code from the file, else compiled now."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, lambda k, v: isinstance(k, str) and isinstance(v, CodeType))

    def exec(self, source: Any, globals: Any = None, locals: Any = None) -> None:
        if not isinstance(source, str):  # only dataclasses calls it, with text: anything else as exec does
            exec(source, globals, locals)
            return
        code = self.kept.get(source)
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)  # as exec compiles dataclasses' text
            self.made += 1
        self.used[source] = code
        exec(code, globals, locals)


class ForwardRefCode(KeptFile):
    """``compile`` for ``typing``, whose ``ForwardRef`` compiles each string annotation it is
    made from (pydantic's models make one per field, typing's generics per string argument:
    about 900 compiles in ``hetflow nodes``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, lambda k, v: isinstance(k, str) and isinstance(v, CodeType))

    def compile(self, source: Any, filename: Any, mode: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or filename != "<string>" or mode != "eval" or not isinstance(source, str):
            return compile(source, filename, mode, *args, **kwargs)  # not ForwardRef's call: as compile does
        code = self.kept.get(source)
        if code is None:
            code = compile(source, "<string>", "eval", dont_inherit=True)  # typing has no __future__ flags
            self.made += 1
        self.used[source] = code
        return code


class RegexCode(KeptFile):
    """``re._compiler.compile`` with the translation of each str or bytes pattern kept, once
    a second command has compiled it: some patterns are made new at every run (tokenize's,
    from a set of string prefixes, whose order changes with the hash seed), so a pattern
    first seen is only noted, by a digest, in a small file of its own (``seen``)."""

    def __init__(self, path: Path, stdlib: Callable[..., Any], seen: Path) -> None:
        super().__init__(path, lambda k, v: isinstance(k, tuple) and isinstance(v, tuple) and len(v) == 5)
        self.stdlib = stdlib
        self.seen = KeptFile(seen, lambda k, v: isinstance(k, bytes) and v is True)

    def compile(self, p: Any, flags: int = 0) -> Any:
        if not isinstance(p, (str, bytes)) or flags & _re_compiler.SRE_FLAG_DEBUG:
            return self.stdlib(p, flags)  # a parsed pattern (re.Scanner's) or debug output: the stdlib's
        key = (p, int(flags))
        made = self.kept.get(key)
        if made is not None:
            self.used[key] = made
            return _re_compiler._sre.compile(p, *made)
        made = translate(p, int(flags))
        digest = hashlib.blake2b(repr(key).encode(), digest_size=12).digest()
        if digest in self.seen.kept:  # a second command compiles it: kept from now on
            self.used[key] = made
            self.made += 1
        else:
            self.seen.used[digest] = True
            self.seen.made += 1
        return _re_compiler._sre.compile(p, *made)

    def save(self) -> None:
        super().save()
        self.seen.save()


def translate(pattern: str | bytes, flags: int) -> tuple[int, list[int], int, dict[str, int], tuple[Any, ...]]:
    """What ``re._compiler.compile`` hands ``_sre.compile`` after the pattern: the flags, the
    engine's code, the groups, the group names both ways (as ints, lists, dicts: marshal's)."""
    parsed = _re_parser.parse(pattern, flags)
    code = _re_compiler._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup: list[str | None] = [None] * parsed.state.groups
    for name, index in groupindex.items():
        indexgroup[index] = name
    return (
        int(flags | parsed.state.flags),
        [int(c) for c in code],
        parsed.state.groups - 1,
        groupindex,
        tuple(indexgroup),
    )


def kept_path(name: str, env: Mapping[str, str] | None = None) -> Path:
    return cache_dir(env) / f"{name}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


def read_kept(path: Path, valid: Callable[[Any, Any], bool]) -> dict[Any, Any]:
    """The file's entries that ``valid`` accepts; {} when it is absent, damaged or not ours:
    a file another user owns, or one others may write (``$XDG_CACHE_HOME`` in a shared
    folder), is not run."""
    try:
        with path.open("rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                return {}
            data = f.read()
    except OSError:
        return {}
    digest, body = data[:_DIGEST], data[_DIGEST:]
    if len(digest) != _DIGEST or hashlib.sha256(body).digest() != digest:
        return {}
    try:
        kept = marshal.loads(body)
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(kept, dict):
        return {}
    return {k: v for k, v in kept.items() if valid(k, v)}


def _regex_hook_fits() -> bool:
    """This Python's ``re`` has the internals ``RegexCode`` calls (3.11 to 3.13 do)."""
    return all(
        hasattr(m, a)
        for m, a in (
            (_re_compiler, "compile"),
            (_re_compiler, "_code"),
            (_re_compiler, "_sre"),
            (_re_compiler, "SRE_FLAG_DEBUG"),
            (_re_parser, "parse"),
        )
    )


@contextlib.contextmanager
def kept_compiles(
    env: Mapping[str, str] | None = None, command: str = ""
) -> Iterator[tuple[DataclassCode, RegexCode | None, ForwardRefCode] | None]:
    """For the block, dataclasses' methods, typing's forward references and regular
    expressions compile through their kept files (``DataclassCode``, ``ForwardRefCode``,
    ``RegexCode``); the stdlib's own again after it, and
    each file saved.  Nested or turned off: as is.  ``command`` (the command's first word:
    ``validate``, ``ps``) has files of its own, so that each reads only what it makes."""
    env = os.environ if env is None else env
    part = f"-{command}" if _COMMAND.fullmatch(command) else "-other" if command else ""
    hooked = "exec" in vars(dataclasses) or "compile" in vars(typing)
    if env.get(OFF_ENV, "1") in ("0", "no", "false") or hooked:
        yield None
        return
    code = DataclassCode(kept_path(f"dataclass-code{part}", env))
    forward = ForwardRefCode(kept_path(f"typing-code{part}", env))
    regex = None
    if _regex_hook_fits():
        made, seen = kept_path(f"regex-code{part}", env), kept_path(f"regex-seen{part}", env)
        regex = RegexCode(made, _re_compiler.compile, seen)
    dataclasses.exec = code.exec  # type: ignore[attr-defined]  # found before the builtin by _create_fn
    typing.compile = forward.compile  # type: ignore[attr-defined]  # found before the builtin by ForwardRef
    if regex is not None:
        _re_compiler.compile = regex.compile
    try:
        yield code, regex, forward
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
        del typing.compile  # type: ignore[attr-defined]
        forward.save()
        if regex is not None:
            _re_compiler.compile = regex.stdlib
            regex.save()
        code.save()
