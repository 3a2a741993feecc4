"""Step templates: ``templates:`` (in the file, or in files named by ``include:``) hold
partial steps; a step that says ``use: NAME`` starts from that template and overrides it.

Merging is on the YAML mappings, before validation: mappings merge key by key, deeply
(so ``resources: {memory: 8Gi}`` keeps the template's cpus), anything else is replaced.
A template may ``use`` another.  Keys that came from a template of this file keep their
own line numbers; keys from an included file are reported at the step's ``use:`` line.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hetflow.errors import Problem

Loc = tuple[str | int, ...]
Compose = Callable[[str, str], tuple[Any, dict[Loc, int], list[Problem]]]


def apply_templates(
    data: dict[str, Any], file: str, lines: dict[Loc, int], base: Path, compose: Compose, texts: dict[str, str]
) -> list[Problem]:
    """Merge every step's ``use:`` template into it, in place; returns the problems found.
    ``texts``: included files' texts by path, read from there instead of the file (a run's
    recorded copies), and filled with each file read, so a run can record what it used."""
    steps = data.get("steps")
    templates = data.get("templates", {})
    includes = data.get("include", [])
    problems: list[Problem] = []
    if not isinstance(templates, dict):
        return [Problem(file, lines.get(("templates",), 1), "'templates' is a mapping of name -> partial step")]
    # name -> (template mapping, file it came from, line map prefix in this file or None)
    known: dict[str, tuple[dict[str, Any], str, bool]] = {}
    if isinstance(includes, list):
        for i, inc in enumerate(includes):
            where = lines.get(("include", i), 1)
            if not isinstance(inc, str) or not inc:
                problems.append(Problem(file, where, f"include entry {inc!r} is not a file path"))
                continue
            path = Path(inc) if Path(inc).is_absolute() else base / inc
            try:
                text = texts[str(path)] = texts.get(str(path)) or path.read_text(encoding="utf-8")
            except OSError as exc:
                problems.append(Problem(file, where, f"include {inc!r}: cannot read {path}: {exc.strerror or exc}"))
                continue
            inc_data, _, found = compose(text, str(path))
            problems += found
            if found:
                continue
            if not isinstance(inc_data, dict) or not isinstance(inc_data.get("templates"), dict):
                problems.append(
                    Problem(str(path), 1, "an included file holds 'templates:', a mapping of name -> partial step")
                )
                continue
            extra = sorted(set(inc_data) - {"templates", "apiVersion"})
            if extra:
                problems.append(
                    Problem(
                        str(path),
                        1,
                        f"an included file holds only 'templates' (and apiVersion); found {', '.join(extra)}",
                    )
                )
            for name, body in inc_data["templates"].items():
                if isinstance(body, dict):
                    known[str(name)] = (body, str(path), False)
                else:
                    problems.append(Problem(str(path), 1, f"template {name!r} is not a mapping"))
    elif includes:
        problems.append(Problem(file, lines.get(("include",), 1), "'include' is a list of file paths"))
    for name, body in templates.items():
        if not isinstance(body, dict):
            problems.append(
                Problem(file, lines.get(("templates", name), 1), f"template {name!r} is not a mapping of step keys")
            )
            continue
        known[str(name)] = (body, file, True)
    if not isinstance(steps, dict):
        return problems
    template_lines: dict[str, list[tuple[Loc, int]]] | None = None  # made when a step uses one of this file's
    for sname, step in steps.items():
        if not isinstance(step, dict) or "use" not in step:
            continue
        use_line = lines.get(("steps", sname, "use"), 1)
        merged, local, why = _resolve(step["use"], known, [])
        if why:
            problems.append(Problem(file, use_line, f"step {sname!r}: {why}"))
            continue
        assert merged is not None
        steps[sname] = _merge(merged, step)
        if local:  # (every line read: 180,000 at 10,000 steps, so only when a step uses a template here)
            template_lines = _lines_by_template(lines) if template_lines is None else template_lines
            for rest, line in template_lines.get(str(step["use"]), []):
                lines.setdefault(("steps", sname, *rest), line)
        if not local:
            for rest in _paths(merged):
                lines.setdefault(("steps", sname, *rest), use_line)
    return problems


def _resolve(
    name: Any, known: dict[str, tuple[dict[str, Any], str, bool]], chain: list[str]
) -> tuple[dict[str, Any] | None, bool, str]:
    if not isinstance(name, str) or name not in known:
        names = ", ".join(sorted(known)) or "none"
        close = difflib.get_close_matches(str(name), list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return None, False, f"'use: {name}' names no template{hint} (templates: {names})"
    if name in chain:
        return None, False, "templates use each other in a cycle: " + " -> ".join([*chain, name])
    body, _, local = known[name]
    if "use" in body:
        parent, parent_local, why = _resolve(body["use"], known, [*chain, name])
        if why:
            return None, False, why
        assert parent is not None
        return _merge(parent, {k: v for k, v in body.items() if k != "use"}), local and parent_local, ""
    return body, local, ""


def _merge(template: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(template)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _lines_by_template(lines: dict[Loc, int]) -> dict[str, list[tuple[Loc, int]]]:
    out: dict[str, list[tuple[Loc, int]]] = {}
    for loc, line in lines.items():
        if len(loc) >= 3 and loc[0] == "templates":
            out.setdefault(str(loc[1]), []).append((loc[2:], line))
    return out


def _paths(data: dict[str, Any], prefix: Loc = ()) -> list[Loc]:
    out: list[Loc] = []
    for key, value in data.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
    return out
