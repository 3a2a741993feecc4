"""Load a workflow file: YAML with line numbers, pydantic validation, templating.

Every problem found is reported at once, each as ``file:line: what to change``.
Line numbers come from the YAML node tree, so pydantic's error locations
(``steps.pool.variants.gpu.resources.gpus``) map back to the line the user wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import gc
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import BaseModel, ValidationError

from hetflow.errors import Problem, SpecError
from hetflow.spec.checks import check_workflow
from hetflow.spec.fanout import expand, expand_static, is_fanout
from hetflow.spec.models import ParamValue, Publish, Workflow, fanout_parent
from hetflow.spec.templates import apply_templates

Loc = tuple[str | int, ...]
_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PARAM = re.compile(r"^params\.([A-Za-z_][A-Za-z0-9_-]*)$")
_ITEM_EXPR = re.compile(r"^(item(\.[A-Za-z_][A-Za-z0-9_-]*)?|index)$")


@dataclass(frozen=True)
class LoadedWorkflow:
    """A validated, templated workflow and where each of its parts was written."""

    workflow: Workflow
    file: str
    text: str
    lines: Mapping[Loc, int] = field(repr=False)
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    notes: tuple[Problem, ...] = ()

    def line(self, *loc: str | int) -> int:
        return line_of(self.lines, loc)


def line_of(lines: Mapping[Loc, int], loc: Loc) -> int:
    """The line of the deepest known prefix of ``loc`` (1 when nothing matches)."""
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return 1


def load_workflow(
    path: str | Path, overrides: Mapping[str, object] | None = None, base: Path | None = None
) -> LoadedWorkflow:
    """Load a workflow file; relative data paths, publish targets and includes are read
    against ``base`` (default: the file's directory; a resumed run passes the original's).
    Always parses: the commands load through ``hetflow.state.load_workflow_cached``, which
    keeps big parses under HETFLOW_HOME (spec/ reads only the files a workflow names)."""
    p = Path(path)
    text = read_yaml_text(p, "a workflow YAML")
    return parse_workflow(text, str(p), overrides, base=base or p.resolve().parent)


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


def parse_workflow(
    text: str, file: str = "<workflow>", overrides: Mapping[str, object] | None = None, base: Path | None = None
) -> LoadedWorkflow:
    """Parse, validate and template a workflow; raise SpecError listing every problem."""
    with no_cyclic_gc():
        return _parse(text, file, overrides, base or Path.cwd())


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Parsing allocates hundreds of thousands of small objects and frees almost none, so
    Python's cycle collector would walk the growing heap again and again for nothing (it
    took 40% of loading a 10,000-step file); it is paused while a file is read (or a kept
    parse unpickled: ``hetflow.state.parsecache``) and resumed after, as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _parse(text: str, file: str, overrides: Mapping[str, object] | None, base: Path) -> LoadedWorkflow:
    data, lines, problems = compose_yaml(text, file)
    if problems:
        raise SpecError(problems)
    if not isinstance(data, dict):
        raise SpecError([Problem(file, 1, "a workflow is a YAML mapping with apiVersion, name and steps")])
    problems = _apply_overrides(data, overrides or {}, file, lines)
    template_problems = apply_templates(data, file, lines, base, compose_yaml)
    if template_problems:
        raise SpecError(problems + template_problems)
    try:
        wf = Workflow.model_validate(data)
    except ValidationError as exc:
        problems += [problem_from_error(err, file, lines) for err in exc.errors()]
        raise SpecError(problems) from None
    wf, publish_problems = _workflow_publish(wf, file, lines)
    problems += publish_problems
    wf, fanout_problems = expand_static(wf, file, lambda loc: line_of(lines, loc))
    problems += fanout_problems
    _item_lines(wf, lines)
    wf, template_problems = _render(wf, file, lines)
    problems += template_problems
    wf = absolute_paths(wf, base)
    problems += check_workflow(wf, file, lambda loc: line_of(lines, loc))
    problems = list(dict.fromkeys(problems))  # a fan-out's items repeat their step's problems
    if any(p.severity == "error" for p in problems):
        raise SpecError(problems)
    return LoadedWorkflow(wf, file, text, dict(lines), dict(wf.params), tuple(problems))


def expand_loaded(loaded: LoadedWorkflow, known: Mapping[str, Sequence[Any]]) -> LoadedWorkflow:
    """Expand pending fan-outs whose lists are now known (at submit, or when the step they
    read from has succeeded), with the same checks as the loader's; SpecError on a problem."""
    lines = dict(loaded.lines)
    wf, problems = expand(loaded.workflow, known, loaded.file, lambda loc: line_of(lines, loc))
    _item_lines(wf, lines)
    problems += check_workflow(wf, loaded.file, lambda loc: line_of(lines, loc))
    problems = list(dict.fromkeys(problems))
    if any(p.severity == "error" for p in problems):
        raise SpecError(problems)
    return dataclasses.replace(loaded, workflow=wf, lines=lines)


def _workflow_publish(wf: Workflow, file: str, lines: Mapping[Loc, int]) -> tuple[Workflow, list[Problem]]:
    """Workflow-level ``publish: [{from: STEP/OUT, to: DIR}]`` becomes the step's own publish."""
    if not wf.publish:
        return wf, []
    problems: list[Problem] = []
    extra: dict[str, list[Publish]] = {}
    for i, p in enumerate(wf.publish):
        step, _, out = p.from_.partition("/")
        if step not in wf.steps:
            problems.append(
                Problem(
                    file,
                    line_of(lines, ("publish", i, "from")),
                    f"publish from {p.from_!r} names no step{did_you_mean(step, wf.steps)}; write STEP/OUTPUT or STEP",
                )
            )
            continue
        outputs = (out,) if out else ()
        extra.setdefault(step, []).append(Publish(to=p.to, outputs=outputs, mode=p.mode, endpoint=p.endpoint))
    steps = {
        n: s.model_copy(update={"publish": (*s.publish, *extra[n])}) if n in extra else s for n, s in wf.steps.items()
    }
    return wf.model_copy(update={"steps": steps, "publish": ()}), problems


def _item_lines(wf: Workflow, lines: dict[Loc, int]) -> None:
    """Errors in a fan-out item point at the line of the step it came from."""
    fanned = {n: p for n in wf.steps if (p := fanout_parent(n)) is not None}
    if not fanned:
        return
    by_step: dict[str, list[tuple[Loc, int]]] = {}
    parents = set(fanned.values())
    for loc, line in lines.items():
        if len(loc) >= 2 and loc[0] == "steps" and loc[1] in parents:
            by_step.setdefault(str(loc[1]), []).append((loc[2:], line))
    for item, parent in fanned.items():
        for rest, line in by_step.get(parent, []):
            lines.setdefault(("steps", item, *rest), line)


def absolute_paths(wf: Workflow, base: Path) -> Workflow:
    """Host data paths and publish directories, relative to the workflow file, made absolute
    (no I/O: globs are expanded when a run is submitted)."""

    def absolute(p: str) -> str:
        return p if p.startswith("/") or "://" in p else str(base / p)

    data = {n: d.model_copy(update={"path": absolute(d.path)}) if d.path is not None else d for n, d in wf.data.items()}
    steps = {}
    for n, s in wf.steps.items():
        if s.publish:
            s = s.model_copy(update={"publish": tuple(p.model_copy(update={"to": absolute(p.to)}) for p in s.publish)})
        steps[n] = s
    include = tuple(absolute(i) for i in wf.include)
    return wf.model_copy(update={"data": data, "steps": steps, "include": include})


# --- YAML with line numbers -------------------------------------------------------------


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
        ev = self.parser.get_event()
        line = ev.start_mark.line + 1
        self.lines.setdefault(path, line)
        if isinstance(ev, yaml.AliasEvent):
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
        if isinstance(ev, yaml.ScalarEvent):
            value, n = self.scalar(ev), 1
        else:
            self.depth += 1
            if self.depth > _MAX_DEPTH:
                raise _Refused(line, f"the YAML nests more than {_MAX_DEPTH} levels deep; flatten it")
            if isinstance(ev, yaml.SequenceStartEvent):
                value, n = self.sequence(path)
            else:
                value, n = self.mapping(path)
            self.depth -= 1
        if getattr(ev, "anchor", None):
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
        p = self.parser
        while not p.check_event(yaml.SequenceEndEvent):
            value, k = self.value((*path, len(out)))
            out.append(value)
            n += k
        p.get_event()
        return out, n

    def mapping(self, path: Loc) -> tuple[dict[Any, Any], int]:
        out: dict[Any, Any] = {}
        merges: list[tuple[Any, int]] = []
        n = 1
        p = self.parser
        while not p.check_event(yaml.MappingEndEvent):
            kev = p.peek_event()
            line = kev.start_mark.line + 1
            if not isinstance(kev, yaml.ScalarEvent):
                self.value(("?",))  # the key's own subtree
                self.value(("?",))  # and its value
                self.problems.append(Problem(self.file, line, "a mapping key must be a plain value"))
                continue
            p.get_event()
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
            self.lines[sub] = line
            value, k = self.value(sub)
            out[key] = value
            n += k
        p.get_event()
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


# --- params ---------------------------------------------------------------------------


def _apply_overrides(
    data: dict[str, Any], overrides: Mapping[str, object], file: str, lines: Mapping[Loc, int]
) -> list[Problem]:
    """``-p key=value`` replaces a declared param; the value is read as a YAML scalar so
    ``-p size=128`` stays a number."""
    problems: list[Problem] = []
    params = data.get("params")
    if overrides and not isinstance(params, dict):
        params = {}
        data["params"] = params
    for key, raw in overrides.items():
        assert isinstance(params, dict)
        if key not in params:
            hint = did_you_mean(key, params)
            declared = ", ".join(map(str, params)) or "none"
            problems.append(
                Problem(
                    file,
                    line_of(lines, ("params",)),
                    f"-p {key}=...: the workflow declares no param {key!r}{hint} (declared: {declared})",
                )
            )
            continue
        if not isinstance(raw, str) or isinstance(params[key], str):
            # already typed (resume passes the recorded values), or a declared string stays
            # a string: `-p tag=1.10` must not become the float 1.1
            params[key] = raw
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(params[key], list) and isinstance(value, list):
            params[key] = value  # -p samples='[a, b]' for a list param
        else:
            params[key] = value if isinstance(value, str | int | float | bool) else raw
    return problems


def _render(wf: Workflow, file: str, lines: Mapping[Loc, int]) -> tuple[Workflow, list[Problem]]:
    """Substitute ``{{ params.NAME }}`` in commands and env values."""
    problems: list[Problem] = []

    def sub(text: str, loc: Loc, fanout: bool) -> str:
        def one(m: re.Match[str]) -> str:
            expr = m.group(1)
            pm = _PARAM.match(expr)
            if not pm:
                if _ITEM_EXPR.match(expr):
                    if fanout:
                        return m.group(0)  # a pending fan-out: filled in when its list is known
                    problems.append(
                        Problem(
                            file,
                            line_of(lines, loc),
                            f"'{{{{ {expr} }}}}' is only defined in a step with 'foreach' or 'matrix'",
                        )
                    )
                    return m.group(0)
                head = expr.split(".", 1)[0]
                hint = "" if head == "params" else did_you_mean(head, ("item", "index"))
                if head in wf.params:
                    problems.append(
                        Problem(
                            file,
                            line_of(lines, loc),
                            f"'{{{{ {expr} }}}}' names nothing; params are written '{{{{ params.{head} }}}}'",
                        )
                    )
                    return m.group(0)
                problems.append(
                    Problem(
                        file,
                        line_of(lines, loc),
                        f"'{{{{ {expr} }}}}' names nothing{hint}; "
                        "write '{{ params.NAME }}', or in a fan-out step '{{ item }}', '{{ item.FIELD }}' "
                        "or '{{ index }}'",
                    )
                )
                return m.group(0)
            name = pm.group(1)
            if name not in wf.params:
                hint = did_you_mean(name, wf.params)
                problems.append(
                    Problem(
                        file,
                        line_of(lines, loc),
                        f"'{{{{ params.{name} }}}}' names no param{hint}; declare it under 'params'",
                    )
                )
                return m.group(0)
            value = wf.params[name]
            if isinstance(value, list):
                problems.append(
                    Problem(
                        file,
                        line_of(lines, loc),
                        f"'{{{{ params.{name} }}}}' is a list; iterate it with foreach: '{{{{ params.{name} }}}}'",
                    )
                )
                return m.group(0)
            return str(value).lower() if isinstance(value, bool) else str(value)

        if "{{" not in text:
            return text
        if "{{" in _TEMPLATE.sub("", text):
            problems.append(
                Problem(
                    file,
                    line_of(lines, loc),
                    f"{text[:60]!r} opens '{{{{' without a matching '}}}}'; close it, e.g. '{{{{ params.NAME }}}}'",
                )
            )
            return text
        return _TEMPLATE.sub(one, text)

    steps = {}
    for sname, step in wf.steps.items():
        fan = is_fanout(step)
        base: Loc = ("steps", sname)
        update: dict[str, Any] = {}
        if step.command is not None:
            update["command"] = tuple(sub(a, (*base, "command", i), fan) for i, a in enumerate(step.command))
        update["env"] = {k: sub(v, (*base, "env", k), fan) for k, v in step.env.items()}
        if step.variants is not None:
            update["variants"] = {
                vname: v.model_copy(
                    update={
                        "command": tuple(
                            sub(a, (*base, "variants", vname, "command", i), fan) for i, a in enumerate(v.command)
                        ),
                        "env": {k: sub(x, (*base, "variants", vname, "env", k), fan) for k, x in v.env.items()},
                    }
                )
                for vname, v in step.variants.items()
            }
        steps[sname] = step.model_copy(update=update)
    return wf.model_copy(update={"steps": steps}), problems


# --- pydantic errors as file:line messages ---------------------------------------------


def problem_from_error(err: Any, file: str, lines: Mapping[Loc, int], root: type[BaseModel] = Workflow) -> Problem:
    """A pydantic error as ``file:line: what to change``, for any model read from YAML."""
    loc: Loc = tuple(err["loc"])
    where = ".".join(str(x) for x in loc) or "the top level"
    if err["type"] == "extra_forbidden":
        key, parent = str(loc[-1]), ".".join(str(x) for x in loc[:-1]) or "the top level"
        allowed = _allowed_keys(root, loc[:-1])
        msg = f"unknown key {key!r} in {parent}{did_you_mean(key, allowed)}; allowed keys: {', '.join(allowed)}"
    elif err["type"] == "missing":
        parent = ".".join(str(x) for x in loc[:-1]) or "the top level"
        msg = f"{parent}: required key {loc[-1]!r} is missing"
    elif err["type"] == "literal_error" and loc == ("apiVersion",):
        msg = f"apiVersion {err.get('input')!r} is not supported; write 'apiVersion: hetflow/v1'"
    else:
        text = str(err["msg"]).removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) or got is None or repr(got) in text else f" (got {got!r})"
        msg = f"{where}: {text}{shown}" if loc else text
    return Problem(file, line_of(lines, loc), msg)


def _allowed_keys(root: type[BaseModel], loc: Loc) -> list[str]:
    """Walk the models along ``loc`` (through lists, tuples and dicts) to list the keys
    allowed there, as written in the file (aliases)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {(f.alias or n): f for n, f in tp.model_fields.items()}
            if str(part) not in fields:
                return []
            tp = fields[str(part)].annotation
        elif typing.get_origin(tp) in (list, tuple, dict):
            tp = typing.get_args(tp)[-1] if typing.get_origin(tp) is dict else typing.get_args(tp)[0]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(f.alias or n) for n, f in tp.model_fields.items()]
    return []


def _unwrap(tp: Any) -> Any:
    """``X | None`` -> X; ``Annotated[X, ...]`` -> X."""
    if typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return tp


def did_you_mean(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
