"""A YAML file as plain values with the line of every key: hetflow's one YAML reader.

``compose_yaml`` builds values straight from libyaml's events (anchors, aliases and merge
keys, duplicate keys reported, alias bombs refused); ``read_yaml_text`` reads a file
hetflow is given (size, encoding) with a message naming it; ``line_of`` maps a pydantic
error location back to the line the user wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml

from hetflow.errors import Problem, SpecError

Loc = tuple[str | int, ...]


def line_of(lines: Mapping[Loc, int], loc: Loc) -> int:
    """The line of the deepest known prefix of ``loc`` (1 when nothing matches)."""
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return 1


def read_yaml_text(path: Path, what: str) -> str:
    """The text of a YAML file hetflow reads (workflow, include, cluster, catalog, settings),
    or SpecError naming the file: missing, a directory, over ``MAX_BYTES`` (checked before
    reading), or not UTF-8 (with the line of the first bad byte)."""
    try:
        if path.is_dir():
            raise SpecError([Problem(str(path), 1, f"is a directory; give the path of {what}")])
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SpecError(
                [Problem(str(path), 1, f"the file is {size / 1024**2:.0f} MiB, over the 64 MiB limit; split it")]
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError([Problem(str(path), 1, f"no such file; give the path of {what}")]) from None
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
        raise SpecError([Problem(str(path), 1, f"cannot read the file: {exc}")]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise SpecError(
            [Problem(str(path), line, f"byte {raw[exc.start]:#04x} is not UTF-8; save the file as UTF-8")]
        ) from None


_CLoader = getattr(yaml, "CSafeLoader", None)


class _Loader(_CLoader or yaml.SafeLoader):  # type: ignore[misc]
    """YAML's safe schema, parsed by libyaml where PyYAML was built with it (about five
    times faster than the pure-Python parser), with each plain scalar's tag resolved once
    per distinct text (a big workflow repeats its images, commands and keys)."""

    _resolved: ClassVar[dict[tuple[str, bool, bool], str]] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode:
            key = (value, implicit[0], implicit[1])
            tag = self._resolved.get(key)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(self._resolved) < 100_000:
                    self._resolved[key] = tag
            return tag
        return super().resolve(kind, value, implicit)


def compose_yaml(text: str, file: str) -> tuple[Any, dict[Loc, int], list[Problem]]:
    """The document as plain values, the line of every key (and list item), and problems.

    Built straight from the parser's events (no node tree): anchors and aliases, merge keys
    (``<<: *defaults``, explicit keys win), duplicate and non-scalar keys reported; aliases
    that would expand past ``MAX_VALUES`` values (an alias bomb) are refused."""
    if len(text) > MAX_BYTES:
        return None, {}, [Problem(file, 1, f"the file is over {MAX_BYTES // 1024**2} MiB; split it (limit: 64 MiB)")]
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        return None, {}, [Problem(file, line, "the file holds a NUL byte; a YAML file is text: remove it")]
    try:
        builder = _EventBuilder(text, file)  # the reader checks the characters as it starts
        data = builder.document()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        return None, {}, [Problem(file, line, f"not valid YAML: {exc.problem or exc}")]
    except yaml.reader.ReaderError as exc:  # a control character: it has a position, not a mark
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        c = exc.character
        code = ord(c) if isinstance(c, str) else int(c)
        return (
            None,
            {},
            [Problem(file, line, f"not valid YAML: control character U+{code:04X} is not allowed; remove it")],
        )
    except yaml.YAMLError as exc:
        return None, {}, [Problem(file, 1, f"not valid YAML: {exc}")]
    except _Refused as exc:
        return None, {}, [Problem(file, exc.line, exc.message)]
    except RecursionError:
        return None, {}, [Problem(file, 1, f"the YAML nests too deeply (more than about {_MAX_DEPTH} levels)")]
    if data is _EMPTY:
        return (
            None,
            {},
            [Problem(file, 1, "the file is empty; a workflow needs apiVersion, name and steps")],
        )
    return data, builder.lines, builder.problems


MAX_VALUES = 2_000_000  # values a document may expand to, aliases counted at their full size
MAX_ALIASES = 10_000  # alias uses in one document (a workflow uses a handful)
MAX_BYTES = 64 * 1024**2  # a 10,000-step workflow is about 3 MB
_MAX_DEPTH = 100  # a workflow nests about 8 levels (steps.S.variants.V.resources.memory); params a few more
_MERGE = "tag:yaml.org,2002:merge"
_EMPTY = object()


class _Everything:
    def __contains__(self, item: object) -> bool:
        return True


class _Refused(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


class _EventBuilder:
    """Plain values from libyaml's events; scalars constructed once per distinct (tag, text)."""

    def __init__(self, text: str, file: str) -> None:
        self.parser = _Loader(text)
        self.file = file
        self.lines: dict[Loc, int] = {}
        self.problems: list[Problem] = []
        self.constructor = yaml.SafeLoader("")
        self.scalars: dict[tuple[Any, str, Any], Any] = {}
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.total = 0
        self.depth = 0
        self.aliases = 0

    def document(self) -> Any:
        p = self.parser
        p.get_event()  # stream start
        if p.check_event(yaml.StreamEndEvent):
            return _EMPTY
        p.get_event()  # document start
        value, _ = self.value(())
        p.get_event()  # document end
        if not p.check_event(yaml.StreamEndEvent):
            line = p.peek_event().start_mark.line + 1
            raise _Refused(line, "a workflow file holds one YAML document; remove the second '---' and what follows")
        return value

    def spend(self, n: int, line: int) -> None:
        self.total += n
        if self.total > MAX_VALUES:
            raise _Refused(
                line,
                f"the YAML expands to more than {MAX_VALUES:,} values through its aliases (an alias bomb?); "
                "write the values out, or use fewer nested aliases",
            )

    def value(self, path: Loc) -> tuple[Any, int]:
        """The next value and how many values it stands for (aliases at their full size)."""
        return self.value_of(self.parser.get_event(), path)

    def value_of(self, ev: Any, path: Loc) -> tuple[Any, int]:
        """The value that starts with event ``ev`` (already taken from the parser)."""
        kind = type(ev)
        if kind is _Scalar:  # the most common case first, with nothing to nest or anchor
            line = ev.start_mark.line + 1
            if path not in self.lines:
                self.lines[path] = line
            self.total += 1
            if self.total > MAX_VALUES:
                self.spend(0, line)
            value = self.scalar(ev)
            if ev.anchor:
                self.anchors[ev.anchor] = (value, 1)
            return value, 1
        line = ev.start_mark.line + 1
        self.lines.setdefault(path, line)
        if kind is _Alias:
            if ev.anchor not in self.anchors:
                raise _Refused(line, f"alias *{ev.anchor} names no anchor defined before it (&{ev.anchor})")
            value, n = self.anchors[ev.anchor]
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Refused(line, f"the YAML uses more than {MAX_ALIASES:,} aliases (*name); write the values out")
            self.spend(n, line)
            return value, n
        self.total += 1
        if self.total > MAX_VALUES:
            self.spend(0, line)
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _Refused(line, f"the YAML nests more than {_MAX_DEPTH} levels deep; flatten it")
        if kind is _SequenceStart:
            value, n = self.sequence(path)
        else:
            value, n = self.mapping(path)
        self.depth -= 1
        if ev.anchor:
            self.anchors[ev.anchor] = (value, n)
        return value, n

    def tag_of(self, ev: Any) -> str:
        if ev.tag and ev.tag != "!":
            return str(ev.tag)
        if ev.tag == "!":
            return "tag:yaml.org,2002:str"
        return str(self.parser.resolve(yaml.ScalarNode, ev.value, ev.implicit))

    def scalar(self, ev: Any) -> Any:
        key = (ev.tag, ev.value, ev.implicit)
        try:
            return self.scalars[key]
        except KeyError:
            pass
        text = ev.value
        if ev.tag is None and ev.implicit[0] and text and text[0] not in _RESOLVED_FIRST and "\x00" not in text:
            self.scalars[key] = text  # a plain scalar no implicit tag can match: a string, as is
            return text
        tag = self.tag_of(ev)
        node = yaml.ScalarNode(tag, ev.value, ev.start_mark, ev.end_mark, ev.style)
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError:
            raise _Refused(ev.start_mark.line + 1, f"unknown YAML tag {tag!r}; remove it") from None
        except Exception:  # PyYAML's constructors: ValueError for 2024-13-45, AttributeError for
            # '!!timestamp x' (a regex that did not match); whatever they raise, it is the value's fault
            raise _Refused(
                ev.start_mark.line + 1, f"{ev.value[:60]!r} is not a valid {tag.rsplit(':', 1)[-1]}; fix or quote it"
            ) from None
        if isinstance(value, str) and "\x00" in value:
            raise _Refused(
                ev.start_mark.line + 1,
                "a value holds a NUL byte (\\0), which no command, path or variable can carry; remove it",
            )
        if isinstance(value, _SCALARS):
            self.scalars[key] = value
        return value

    def sequence(self, path: Loc) -> tuple[list[Any], int]:
        out: list[Any] = []
        n = 1
        get = self.parser.get_event
        while True:
            ev = get()
            if type(ev) is _SequenceEnd:
                return out, n
            value, k = self.value_of(ev, (*path, len(out)))
            out.append(value)
            n += k

    def mapping(self, path: Loc) -> tuple[dict[Any, Any], int]:
        out: dict[Any, Any] = {}
        merges: list[tuple[Any, int]] = []
        n = 1
        get = self.parser.get_event
        lines = self.lines
        while True:
            kev = get()
            kind = type(kev)
            if kind is _MappingEnd:
                break
            line = kev.start_mark.line + 1
            if kind is not _Scalar:
                self.value_of(kev, ("?",))  # the key's own subtree
                self.value(("?",))  # and its value
                self.problems.append(Problem(self.file, line, "a mapping key must be a plain value"))
                continue
            if kev.value == "<<" and self.tag_of(kev) == _MERGE:
                value, k = self.value((*path, "<<"))
                merges.append((value, line))
                n += k
                continue
            key = self.scalar(kev)
            if isinstance(key, list | dict):
                self.problems.append(Problem(self.file, line, "a mapping key must be a plain value"))
                self.value(("?",))
                continue
            if key in out:
                self.problems.append(Problem(self.file, line, f"duplicate key {key!r}; keep only one"))
            sub: Loc = (*path, key)
            lines[sub] = line
            value, k = self.value(sub)
            out[key] = value
            n += k
        for value, line in merges:
            sources = value if isinstance(value, list) else [value]
            for src in sources:
                if not isinstance(src, dict):
                    self.problems.append(Problem(self.file, line, "'<<' merges mappings only (an alias of a mapping)"))
                    continue
                for key, v in src.items():
                    if key not in out:
                        out[key] = v
                        self.lines.setdefault((*path, key), line)
        return out, n


_SCALARS = (str, int, float, bool, type(None))
# The first characters for which YAML's safe schema has an implicit tag (bool, int, float,
# null, timestamp, merge, value): a plain scalar starting otherwise resolves to a string.
# (Every character, so no shortcut, if a resolver for any first character or a path is added.)
_RESOLVED_FIRST: frozenset[str] | _Everything = (
    frozenset(_Loader.yaml_implicit_resolvers)
    if None not in _Loader.yaml_implicit_resolvers and not _Loader.yaml_path_resolvers
    else _Everything()
)
# libyaml's parser gives exactly these classes: compared with ``is``, not isinstance
_Scalar, _Alias = yaml.ScalarEvent, yaml.AliasEvent
_SequenceStart, _SequenceEnd, _MappingEnd = yaml.SequenceStartEvent, yaml.SequenceEndEvent, yaml.MappingEndEvent
