"""Profiles, params and resource overrides: the settings file's ``params:``, ``resources:``
and ``profiles:`` sections, a ``--params-file``, and the order they are layered in.

As Nextflow's ``-profile a,b`` and ``-params-file``, and Snakemake's ``--profile`` and
``--configfile``.  One order, each level winning over the one before it:

    settings file  <  its profiles, in the order given (--profile slurm,gpu: gpu wins)
                   <  --params-file FILE  <  -p NAME=VALUE

(backend, cluster and the other settings: file < HETFLOW_* environment < profiles <
--backend/--cluster; a profile is chosen on the command line, the environment is ambient).

Every value is checked where it is read, and a bad one is named as ``FILE:LINE: what to
change`` (UsageError, exit 2).  What a workflow lacks (a param it does not declare, a
template or step an override names) is refused when a profile, the params file or ``-p``
names it (chosen for this run), and skipped with a note when the file's top level does (it
serves every workflow).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetflow.errors import SpecError, UsageError
from hetflow.spec import (
    RESOURCE_KINDS,
    LoadedWorkflow,
    Origin,
    ResourceOverrides,
    compose_yaml,
    did_you_mean,
    line_of,
    override_resources,
    read_yaml_text,
    resource_problem,
)

Loc = tuple[str | int, ...]


@dataclass
class Layers:
    """What a settings file's sections (and the profiles chosen) give a run, with where each
    value was written: built up by ``add`` inside ``load_settings``, which hands its parts
    on in the frozen ``Settings``."""

    params: dict[str, Any] = field(default_factory=dict)
    param_origins: dict[str, Origin] = field(default_factory=dict)
    resources: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    resource_origins: dict[tuple[str, str], Origin] = field(default_factory=dict)

    def add(self, section: Mapping[str, Any], lines: Mapping[Loc, int], file: str, loc: Loc, part: str) -> None:
        """Layer one section (the file's top level, or a profile) over what is here."""
        for name, value in (section.get("params") or {}).items():
            self.params[str(name)] = value
            where = line_of(lines, (*loc, "params", name))
            # the file's top level serves every workflow: a param one does not declare is
            # skipped with a note; a profile is chosen for this run, and refused as -p is
            self.param_origins[str(name)] = Origin(file, where, part, optional=not part)
        for kind, named in (section.get("resources") or {}).items():
            for name, values in named.items():
                mine = self.resources.setdefault(kind, {})
                mine[name] = {**mine.get(name, {}), **values}
                where = line_of(lines, (*loc, "resources", kind, name))
                self.resource_origins[(kind, name)] = Origin(file, where, part, optional=not part)


def check_section(section: Mapping[str, Any], lines: Mapping[Loc, int], file: str, loc: Loc) -> str | None:
    """The first problem with a section's ``params:`` and ``resources:``, as FILE:LINE: text."""

    def at(*sub: str | int) -> str:
        return f"{file}:{line_of(lines, (*loc, *sub))}: {'.'.join(str(x) for x in (*loc, *sub))}"

    params = section.get("params")
    if params is not None:
        if not isinstance(params, dict):
            return f"{at('params')} is a mapping of param names to values, e.g. params: {{lr: 0.01}}"
        for name, value in params.items():
            if not _param_value(value):
                return f"{at('params', name)} is {_kind(value)}; a param is a string, number, boolean or a list of them"
    resources = section.get("resources")
    if resources is not None:
        if not isinstance(resources, dict):
            return f"{at('resources')} is a mapping: resources: {{template: {{NAME: {{memory: 2Gi}}}}, step: {{...}}}}"
        for kind, named in resources.items():
            if kind not in RESOURCE_KINDS:
                hint = did_you_mean(str(kind), RESOURCE_KINDS)
                return (
                    f"{at('resources', kind)}: resources are overridden by 'template' (a step's use:) or 'step'"
                    f" (its name){hint}, not {kind!r}"
                )
            if not isinstance(named, dict):
                return f"{at('resources', kind)} is a mapping of {kind} names to resources, e.g. {{py: {{cpus: 2}}}}"
            for name, values in named.items():
                problem = resource_problem(values)
                if problem is not None:
                    return f"{at('resources', kind, name)}: {problem}"
    return None


def choose_profiles(
    profiles: object, lines: Mapping[Loc, int], file: str, chosen: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The profiles named on the command line, in order, from the file's ``profiles:``."""
    if profiles is None:
        profiles = {}
    if not isinstance(profiles, dict):
        raise UsageError(f"{file}:{line_of(lines, ('profiles',))}: profiles is a mapping of names to settings")
    out = []
    for name in chosen:
        if name not in profiles:
            known = ", ".join(map(str, profiles)) or "none (add a 'profiles:' section)"
            _refuse(
                f"--profile {name}: {file} has no profile {name!r}{did_you_mean(name, profiles)}; its profiles: {known}"
            )
        body = profiles[name] if profiles[name] is not None else {}
        if not isinstance(body, dict):
            _refuse(
                f"{file}:{line_of(lines, ('profiles', name))}: profile {name!r} is {_kind(body)}; a profile is a"
                " mapping of settings keys, e.g. {backend: slurm, params: {lr: 0.1}}"
            )
        out.append((name, body))
    return out


def split_profiles(options: Sequence[str]) -> list[str]:
    """``--profile slurm,gpu`` (or given twice): the names, in order; an empty one is refused."""
    names = [n.strip() for opt in options for n in opt.split(",")]
    if any(not n for n in names):
        raise UsageError(f"--profile {','.join(options)!r}: give profile names separated by commas, e.g. slurm,gpu")
    return names


def read_params_file(path: Path) -> tuple[dict[str, Any], dict[str, Origin]]:
    """A ``--params-file``: a YAML or JSON mapping of param names to values (JSON is read as
    YAML, as Nextflow's -params-file takes both), with the line of each."""
    if not path.is_file():
        raise UsageError(f"--params-file {path}: no such file")
    text = read_yaml_text(path, "a params file (YAML or JSON)")
    if path.suffix == ".json":
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    data, lines, problems = compose_yaml(text, str(path)) if text.strip() else ({}, {}, [])
    if problems:
        raise SpecError(problems)
    if not isinstance(data, dict):
        raise UsageError(
            f"{path}:1: a params file is a mapping of param names to values (e.g. 'lr: 0.1' or"
            f' {{"lr": 0.1}}); this one holds {_kind(data)}'
        )
    problem = check_section({"params": data}, {("params", *k): v for k, v in lines.items()}, str(path), ())
    if problem is not None:
        raise UsageError(problem.replace(": params.", ": ", 1))
    origins = {str(k): Origin(str(path), line_of(lines, (k,))) for k in data}
    return {str(k): v for k, v in data.items()}, origins


def layer_params(
    settings_params: Mapping[str, Any],
    settings_origins: Mapping[str, Origin],
    file_params: tuple[Mapping[str, Any], Mapping[str, Origin]] | None,
    cli: Mapping[str, str],
) -> tuple[dict[str, object], dict[str, Origin]]:
    """The params a run is loaded with, and where each was written: settings (and profiles)
    < params file < -p (a -p value has no origin: the loader names it as ``-p``)."""
    params: dict[str, object] = dict(settings_params)
    origins = dict(settings_origins)
    if file_params is not None:
        params |= file_params[0]
        origins |= file_params[1]
    for key, value in cli.items():
        params[key] = value
        origins.pop(key, None)
    return params, origins


def param_sources(params: Mapping[str, object], origins: Mapping[str, Origin]) -> dict[str, str]:
    """Where each of the ``params`` given over the workflow's defaults (``layer_params``'
    output) was written, as ``show`` names it: "-p", "params-file FILE:LINE", "config
    FILE:LINE" (the settings file's top level, ``optional``) or "profile 'NAME' FILE:LINE"."""
    out: dict[str, str] = {}
    for name in params:
        origin = origins.get(name)
        if origin is None or not origin.file:
            out[name] = "-p"
            continue
        where = f"{origin.file}:{origin.line}"
        if origin.part:
            out[name] = f"{origin.part} {where}"
        else:
            out[name] = f"config {where}" if origin.optional else f"params-file {where}"
    return out


def apply_resources(
    loaded: LoadedWorkflow,
    resources: ResourceOverrides,
    origins: Mapping[tuple[str, str], Origin] | None = None,
    *,
    strict: bool,
) -> LoadedWorkflow:
    """The workflow with the settings' resource overrides applied (``spec.load.overrides``):
    ``strict`` at submit (an override naming no template or step is refused); a run read
    back by its executor or a resume applies the ones recorded with it (``Settings``)."""
    if not resources:
        return loaded
    wf, problems = override_resources(loaded.workflow, resources, origins or {}, strict=strict)
    if any(p.severity == "error" for p in problems):
        raise SpecError(problems)
    return dataclasses.replace(loaded, workflow=wf, notes=(*loaded.notes, *problems))


def _param_value(value: object) -> bool:
    scalar = (str, int, float, bool)
    return isinstance(value, scalar) or (isinstance(value, list) and all(isinstance(v, scalar) for v in value))


def _kind(value: object) -> str:
    if value is None:
        return "empty"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"the string {value!r}" if isinstance(value, str) else repr(value)


def _refuse(message: str) -> Any:
    raise UsageError(message)
