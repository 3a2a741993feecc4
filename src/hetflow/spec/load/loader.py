"""Load a workflow file: YAML with line numbers, pydantic validation, templating.

The steps, in ``_parse``'s order: ``yamlfile`` (the YAML and the line of every key),
``params`` (``-p`` overrides), ``templates`` (``use:``/``include:``), pydantic
validation (``problems``: its errors as ``file:line`` messages), ``params`` again
(``{{ params.NAME }}`` substituted in every templated field: ``templated``), ``fanout``
(static lists expanded, their items filled into the same fields), ``checks``.

Every problem found is reported at once, each as ``file:line: what to change``.
Line numbers come from the YAML node tree, so pydantic's error locations
(``steps.pool.variants.gpu.resources.gpus``) map back to the line the user wrote.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hetflow.errors import Problem, SpecError
from hetflow.lazy import no_cyclic_gc
from hetflow.spec.expansion.fanout import expand, expand_static
from hetflow.spec.fields.naming import fanout_parent
from hetflow.spec.load.overrides import Origin
from hetflow.spec.load.params import apply_overrides, render_params
from hetflow.spec.load.templates import apply_templates
from hetflow.spec.models import ParamValue, Publish, Workflow
from hetflow.spec.source.problems import did_you_mean, problem_from_error
from hetflow.spec.source.yamlfile import Loc, compose_yaml, line_of, read_yaml_text
from hetflow.spec.validate.checks import check_workflow


@dataclass(frozen=True)
class LoadedWorkflow:
    """A validated, templated workflow and where each of its parts was written."""

    workflow: Workflow
    file: str
    text: str
    lines: Mapping[Loc, int] = field(repr=False)
    params: Mapping[str, ParamValue] = field(default_factory=dict)
    notes: tuple[Problem, ...] = ()
    # the texts of the ``include:`` files as they were read, by path: recorded with a run, so
    # its recorded workflow reads them, not the files as they are later
    includes: Mapping[str, str] = field(default_factory=dict, repr=False)
    # the items of each fan-out known when the file was read (a list, a range, a matrix, a
    # list param), by step: recorded with a run so that each item's values can be shown
    fanouts: Mapping[str, Sequence[Any]] = field(default_factory=dict, repr=False)

    def line(self, *loc: str | int) -> int:
        return line_of(self.lines, loc)


def load_workflow(
    path: str | Path,
    overrides: Mapping[str, object] | None = None,
    base: Path | None = None,
    origins: Mapping[str, Origin] | None = None,
) -> LoadedWorkflow:
    """Load a workflow file; relative data paths, publish targets and includes are read
    against ``base`` (default: the file's directory; a resumed run passes the original's).
    Always parses: the commands load through ``hetflow.state.load_workflow_cached``, which
    keeps big parses under HETFLOW_HOME (spec/ reads only the files a workflow names)."""
    p = Path(path)
    text = read_yaml_text(p, "a workflow YAML")
    return parse_workflow(text, str(p), overrides, base=base or p.resolve().parent, origins=origins)


def parse_workflow(
    text: str,
    file: str = "<workflow>",
    overrides: Mapping[str, object] | None = None,
    base: Path | None = None,
    includes: Mapping[str, str] | None = None,
    origins: Mapping[str, Origin] | None = None,
) -> LoadedWorkflow:
    """Parse, validate and template a workflow; raise SpecError listing every problem.
    ``includes``: the texts of its ``include:`` files by path, used instead of reading them
    (a run's recorded copies, ``LoadedWorkflow.includes``).
    ``origins``: where each override was written (``spec.load.overrides.Origin``; default ``-p``)."""
    with no_cyclic_gc():
        return _parse(text, file, overrides, base or Path.cwd(), dict(includes or {}), origins or {})


def _parse(
    text: str,
    file: str,
    overrides: Mapping[str, object] | None,
    base: Path,
    includes: dict[str, str],
    origins: Mapping[str, Origin],
) -> LoadedWorkflow:
    data, lines, problems, templated = prepare(text, file, overrides, base, includes, origins)
    if data is None or not templated:
        raise SpecError(problems)
    built = build(data, file, lines, base)
    problems += built.problems
    if built.workflow is None or any(p.severity == "error" for p in problems):
        raise SpecError(problems)
    wf = built.workflow
    return LoadedWorkflow(wf, file, text, built.lines, dict(wf.params), tuple(problems), includes, built.fanouts)


def prepare(
    text: str,
    file: str,
    overrides: Mapping[str, object] | None,
    base: Path,
    includes: dict[str, str],
    origins: Mapping[str, Origin],
) -> tuple[dict[str, Any] | None, dict[Loc, int], list[Problem], bool]:
    """The file's YAML as data with each key's line, ``-p`` overrides and templates applied
    (None where the YAML cannot be read as a workflow mapping), the problems found, and
    whether every template applied (the models' errors would repeat a failed one's)."""
    data, lines, problems = compose_yaml(text, file)
    if problems:
        return None, lines, problems, False
    if not isinstance(data, dict):
        return None, lines, [Problem(file, 1, "a workflow is a YAML mapping with apiVersion, name and steps")], False
    problems = apply_overrides(data, overrides or {}, file, lines, origins)
    template_problems = apply_templates(data, file, lines, base, compose_yaml, includes)
    return data, lines, problems + template_problems, not template_problems


@dataclass(frozen=True)
class Built:
    """What ``build`` made of prepared data: the workflow (None where the models refused it:
    its problems say why), its lines (fan-out items' added) and fan-out items, every problem."""

    workflow: Workflow | None
    lines: dict[Loc, int]
    problems: list[Problem]
    fanouts: Mapping[str, Sequence[Any]] = field(default_factory=dict)


def build(data: Mapping[str, Any], file: str, lines: Mapping[Loc, int], base: Path) -> Built:
    """The models' validation, then params, publish, static fan-outs and the whole-workflow
    checks; nothing raises (``lines`` is copied, not changed)."""
    lines = dict(lines)
    try:
        wf = Workflow.model_validate(data)
    except ValidationError as exc:
        return Built(None, lines, [problem_from_error(err, file, lines) for err in exc.errors()])
    wf, problems = render_params(wf, file, lines)
    wf, publish_problems = _workflow_publish(wf, file, lines)
    problems += publish_problems
    wf, fanout_problems, fanouts = expand_static(wf, file, lambda loc: line_of(lines, loc))
    problems += fanout_problems
    _item_lines(wf, lines)
    wf = publish_endpoints(wf)
    wf = absolute_paths(wf, base)
    problems += check_workflow(wf, file, lambda loc: line_of(lines, loc))
    problems = list(dict.fromkeys(problems))  # a fan-out's items repeat their step's problems
    return Built(wf, lines, problems, fanouts)


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


def publish_endpoints(wf: Workflow) -> Workflow:
    """An S3 publish with no ``endpoint:`` of its own takes the one the workflow's S3 data
    declares: the data entry's on the same bucket, else the one endpoint all its S3 data
    names (every entry the same) (results go back to the server the inputs came from, as a user reading
    ``data: {url: s3://in/, endpoint: http://minio:9000}`` expects); with none, or several
    that do not say which, AWS_ENDPOINT_URL or AWS itself decides, as before."""

    def bucket(url: str) -> str:
        return url.removeprefix("s3://").split("/", 1)[0]

    declared = [(bucket(d.url), d.endpoint) for d in wf.data.values() if d.url is not None]
    if not any(e for _, e in declared):
        return wf
    by_bucket = dict(declared)  # a bucket the data reads: its entry's endpoint, even none
    every = {e for _, e in declared}

    def endpoint_of(p: Publish) -> str | None:
        if p.endpoint is not None or not p.to.startswith("s3://"):
            return p.endpoint
        if bucket(p.to) in by_bucket:
            return by_bucket[bucket(p.to)]
        return next(iter(every)) if len(every) == 1 else None

    steps = {
        n: s.model_copy(update={"publish": tuple(p.model_copy(update={"endpoint": endpoint_of(p)}) for p in s.publish)})
        if s.publish
        else s
        for n, s in wf.steps.items()
    }
    return wf.model_copy(update={"steps": steps})


ITEM_LISTS = ("foreach", "matrix")  # a fan-out's own keys, whose values are its items


def _item_lines(wf: Workflow, lines: dict[Loc, int]) -> None:
    """Errors in a fan-out item point at the line of the step it came from.  The lines inside
    the parent's item list (``foreach: [...]``, ``matrix:`` axes) are not copied: an item has
    no list, and copying a 10,000-value list's lines to each of its 10,000 items was
    quadratic (64 s, and a parse cache of 9 million lines, at 3,000 items)."""
    fanned = {n: p for n in wf.steps if (p := fanout_parent(n)) is not None}
    if not fanned:
        return
    by_step: dict[str, list[tuple[Loc, int]]] = {}
    parents = set(fanned.values())
    for loc, line in lines.items():
        if len(loc) >= 2 and loc[0] == "steps" and loc[1] in parents:
            if len(loc) > 3 and loc[2] in ITEM_LISTS:
                continue
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
