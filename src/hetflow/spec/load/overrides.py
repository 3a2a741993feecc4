"""What a run is given from outside its workflow file: where each param's value was written
(a settings file, a profile, a params file, ``-p``), and resources overridden by template
or by step name (a settings profile's ``resources:``).

Nextflow's config selects processes ``withLabel:`` or ``withName:``; hetflow steps carry no
labels, but a step written from a template keeps its name in ``use:`` (``Step.use``), so
``template:`` plays the label's part and ``step:`` the name's:

    resources:
      template: {python: {memory: 2Gi}}   # every step that says use: python
      step: {train: {cpus: 8}}            # step train (and each item of a fan-out train)

A step matched both ways takes the template's override, then the step's (the more specific
wins, as withName wins over withLabel).  Every variant of a matched step is changed: the
override names fields of ``Resources`` (cpus, memory, gpus, ...) and replaces those only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hetflow.errors import Problem
from hetflow.spec.fields.naming import fanout_parent
from hetflow.spec.fields.resources import Resources
from hetflow.spec.models import Step, Workflow
from hetflow.spec.source.problems import did_you_mean

RESOURCE_KINDS = ("template", "step")
ResourceOverrides = Mapping[str, Mapping[str, Mapping[str, Any]]]  # kind -> name -> Resources fields


@dataclass(frozen=True)
class Origin:
    """Where an override was written: a file and line (``-p`` has neither), what part of the
    file (``profile 'gpu'``), and whether a param the workflow does not declare is skipped
    with a note (``optional``: a settings file serves every workflow) or refused."""

    file: str = ""
    line: int = 1
    part: str = ""
    optional: bool = False

    def text(self) -> str:
        return f"{self.file} ({self.part})" if self.part else self.file


def resource_problem(values: object) -> str | None:
    """What is wrong with one override (a mapping of ``Resources`` fields), or None."""
    if not isinstance(values, dict) or not values:
        return f"give a mapping of resource fields, e.g. {{memory: 2Gi, cpus: 4}}; fields: {_fields()}"
    unknown = [str(k) for k in values if k not in Resources.model_fields]
    if unknown:
        hint = did_you_mean(unknown[0], Resources.model_fields)
        return f"{unknown[0]!r} is no resource field{hint}; fields: {_fields()}"
    try:
        Resources.model_validate(values)
    except ValidationError as exc:
        return "; ".join(_error_text(e) for e in exc.errors())
    return None


def override_resources(
    wf: Workflow, overrides: ResourceOverrides, origins: Mapping[tuple[str, str], Origin], *, strict: bool
) -> tuple[Workflow, list[Problem]]:
    """``wf`` with every matched step's resources overridden; the problems name the file and
    line the override was written at.  ``strict`` (a new run): a template or step the
    workflow does not have is refused (a note, where its origin is ``optional``: a settings
    file's top level serves every workflow); a run read back from the store skips it (its
    file may have been edited since)."""
    problems: list[Problem] = []
    by_template = overrides.get("template", {})
    by_step = overrides.get("step", {})
    if strict:
        templates = set(wf.templates) | {s.use for s in wf.steps.values() if s.use}
        steps = set(wf.steps) | {p for p in map(fanout_parent, wf.steps) if p}
        for kind, names, known in (("template", by_template, templates), ("step", by_step, steps)):
            for name in names:
                if name not in known:
                    where = origins.get((kind, name), Origin())
                    listed = ", ".join(sorted(known)) or "none"
                    problems.append(
                        Problem(
                            where.file,
                            where.line,
                            f"{where.part + ': ' if where.part else ''}resources.{kind}.{name}: workflow "
                            f"{wf.name!r} has no {kind} {name!r}{did_you_mean(name, known)}; its {kind}s: {listed}"
                            + ("; skipped" if where.optional else ""),
                            "note" if where.optional else "error",
                        )
                    )
        if any(p.severity == "error" for p in problems):
            return wf, problems
    changed: dict[str, Step] = {}
    for sname, step in wf.steps.items():
        layers = [("template", step.use)] if step.use is not None and step.use in by_template else []
        layers += [("step", n) for n in (fanout_parent(sname), sname) if n is not None and n in by_step]
        if not layers:
            continue
        update: dict[str, Any] = {}
        for kind, name in layers:
            update |= (by_template if kind == "template" else by_step)[name]
        where = origins.get(layers[-1], Origin())
        new, problem = _merged(step, update)
        if problem is not None:
            problems.append(
                Problem(where.file, where.line, f"resources override of step {sname!r}: {problem}; change the override")
            )
            continue
        changed[sname] = new
    if not changed:
        return wf, problems
    return wf.model_copy(update={"steps": {**wf.steps, **changed}}), problems


def _merged(step: Step, update: Mapping[str, Any]) -> tuple[Step, str | None]:
    """The step with ``update`` over each variant's resources (a single-image step's own)."""
    try:
        if step.variants is None:
            res = _over(step.resources or Resources(), update)
            return step.model_copy(update={"resources": res}), None
        variants = {k: v.model_copy(update={"resources": _over(v.resources, update)}) for k, v in step.variants.items()}
        return step.model_copy(update={"variants": variants}), None
    except ValidationError as exc:
        return step, "; ".join(_error_text(e) for e in exc.errors())


def _over(res: Resources, update: Mapping[str, Any]) -> Resources:
    return Resources.model_validate({**res.model_dump(exclude_defaults=True), **update})


def _fields() -> str:
    return ", ".join(Resources.model_fields)


def _error_text(error: Any) -> str:
    loc = ".".join(str(x) for x in error.get("loc", ()))
    msg = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg
