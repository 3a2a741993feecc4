"""Every problem of a workflow file in one pass, for ``hetflow validate`` (issue 42).

``parse_workflow`` stops at the first stage that fails: the models' (schema) errors hide the
reference errors, which hide what only the machine can check (data, images, secrets, a
request no node meets).  ``salvage_workflow`` goes on: a step with a schema error is set
aside and the rest built again, so the reference checks run on the steps that parsed; a
step with a reference error is built once more with its references to missing steps
removed (its other errors are then its own), and set aside if it still fails.  What is left
is a ``LoadedWorkflow`` of the sound steps, on which the run-time checks can run.

References to a step set aside are removed from the others (``needs``, ``inputs``, ``when``;
a fan-out over its output sets the fan-out aside too), and a problem that names a step set
aside is not reported: it is that step's problem, reported already.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hetflow.errors import Problem
from hetflow.lazy import no_cyclic_gc
from hetflow.spec.fields.naming import DATA_PREFIX
from hetflow.spec.load.loader import LoadedWorkflow, build, prepare
from hetflow.spec.load.overrides import Origin
from hetflow.spec.source.yamlfile import Loc, read_yaml_text

MAX_ROUNDS = 12  # each round sets aside or repairs at least one step; a file past this is left partial


def salvage_workflow(
    path: str | Path,
    overrides: Mapping[str, object] | None = None,
    origins: Mapping[str, Origin] | None = None,
) -> tuple[LoadedWorkflow | None, list[Problem]]:
    """Every problem of the file at ``path`` (schema, references), each once, and the
    workflow of its sound steps (None where no such part could be built: a YAML error, a
    problem outside any step)."""
    p = Path(path)
    text = read_yaml_text(p, "a workflow YAML")
    with no_cyclic_gc():
        return _salvage(text, str(p), overrides, p.resolve().parent, origins or {})


def _salvage(
    text: str, file: str, overrides: Mapping[str, object] | None, base: Path, origins: Mapping[str, Origin]
) -> tuple[LoadedWorkflow | None, list[Problem]]:
    data, lines, problems, templated = prepare(text, file, overrides, base, {}, origins)
    reported = list(problems)
    if data is None:
        return None, reported
    step_lines = _step_lines(data, lines)
    aside: set[str] = set()
    repaired: set[str] = set()
    if not templated:  # a step whose template failed is set aside
        if (hit := _steps_of(_errors(problems), file, step_lines)) is None:
            return None, reported
        aside |= hit
    for _ in range(MAX_ROUNDS):
        built = build(_without(data, aside, repaired), file, lines, base)
        found = [q for q in built.problems if not _names_any(q, aside)]
        reported += [q for q in found if q not in reported]
        errors = _errors(found)
        if not errors and built.workflow is not None:
            wf, fanouts = built.workflow, built.fanouts
            return LoadedWorkflow(wf, file, text, built.lines, dict(wf.params), tuple(found), {}, fanouts), reported
        hit = _steps_of(errors, file, step_lines)
        if not hit:  # a problem outside any step (or none placed): nothing left to build
            return None, reported
        if built.workflow is None:  # the models refused these steps: set them aside
            aside |= hit
        else:  # references: first without those to missing steps, then aside
            aside |= hit & repaired
            repaired |= hit - aside
    return None, reported


def _errors(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def _step_lines(data: Mapping[str, Any], lines: Mapping[Loc, int]) -> list[tuple[int, int, str]]:
    """Each step's first and last line (the next step's, or the next top-level key's, minus one)."""
    steps = data.get("steps")
    if not isinstance(steps, dict):
        return []
    starts = sorted((lines.get(("steps", n), 0), str(n)) for n in steps)
    tops = sorted(v for k, v in lines.items() if len(k) == 1)
    out = []
    for i, (start, name) in enumerate(starts):
        nxt = starts[i + 1][0] if i + 1 < len(starts) else min((t for t in tops if t > start), default=10**9)
        out.append((start, nxt - 1, name))
    return out


def _steps_of(errors: list[Problem], file: str, step_lines: list[tuple[int, int, str]]) -> set[str] | None:
    """The steps ``errors`` were found in, by line; None where one lies outside every step."""
    hit = set()
    for p in errors:
        names = [n for first, last, n in step_lines if p.file == file and first <= p.line <= last]
        if not names:
            return None
        hit.add(names[0])
    return hit


def _names_any(problem: Problem, steps: set[str]) -> bool:
    """Whether ``problem`` names one of ``steps`` (as 'STEP' or 'STEP/OUTPUT')."""
    return any(re.search(f"'{re.escape(s)}['/]", problem.message) for s in steps)


def _without(data: Mapping[str, Any], aside: set[str], repaired: set[str]) -> dict[str, Any]:
    """``data`` without the steps ``aside`` and every reference to them; the ``repaired``
    steps also lose their references to steps not in the file."""
    steps = data.get("steps")
    if not isinstance(steps, dict):
        return dict(data)
    aside = set(aside)
    while True:  # a fan-out over a step set aside is set aside too
        more = {n for n, s in steps.items() if n not in aside and _fans_over(s, aside)}
        if not more:
            break
        aside |= more
    kept = {n: _trimmed(s, aside if n not in repaired else aside | _missing(s, steps)) for n, s in steps.items()}
    return {**data, "steps": {n: s for n, s in kept.items() if n not in aside}}


def _fans_over(step: object, aside: set[str]) -> bool:
    foreach = step.get("foreach") if isinstance(step, dict) else None
    sources = foreach.values() if isinstance(foreach, dict) else ()
    return any(isinstance(v, str) and v.split("/", 1)[0] in aside for v in sources)


def _missing(step: object, steps: Mapping[str, Any]) -> set[str]:
    """The steps ``step`` names in ``needs`` and ``inputs`` that the file does not have."""
    if not isinstance(step, dict):
        return set()
    needs, inputs = step.get("needs"), step.get("inputs")
    needs = needs if isinstance(needs, list) else []
    inputs = inputs if isinstance(inputs, dict) else {}
    named = [n for n in needs if isinstance(n, str)]
    named += [v.split("/", 1)[0] for v in inputs.values() if isinstance(v, str)]
    return {n for n in named if n not in steps and not n.startswith(DATA_PREFIX)}


def _trimmed(step: object, gone: set[str]) -> object:
    """``step`` (as written) without its references to the steps ``gone``."""
    if not isinstance(step, dict) or not gone:
        return step
    out = dict(step)
    if isinstance(out.get("needs"), list):
        out["needs"] = [n for n in out["needs"] if n not in gone]
    if isinstance(out.get("inputs"), dict):
        inputs = out["inputs"].items()
        out["inputs"] = {k: v for k, v in inputs if not (isinstance(v, str) and v.split("/", 1)[0] in gone)}
    when = out.get("when")
    if isinstance(when, str) and any(re.search(rf"output\(\s*['\"]{re.escape(g)}/", when) for g in gone):
        del out["when"]
    return out
