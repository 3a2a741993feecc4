"""Convert a WfCommons trace (WfFormat 1.5) into a hetflow workflow, for planning.

The rules are those of shared/bench/README.md, so every figure built on a converted trace
is comparable:

* A task's category is its ``name`` without a trailing ``_ID<digits>``.
* Its CPU variant runs ``runtimeInSeconds`` on a speed-1.0 node, with ``coreCount`` cores
  (1 where absent) and ``memoryInBytes`` of memory (1 GiB where absent).
* An edge carries the bytes of the files the child reads and the parent writes
  (``specification.files[].sizeInBytes``); a parent the child reads nothing from is a
  bare ``needs``.
* GPU variants (the traces have none): the category with the largest total run time, and
  every other category with at least 20% of the total, gets a GPU variant beside its CPU
  variant: 1 GPU, 2 cores, the same memory, an estimate of the CPU time / 8.5 (the A100
  speed-up; the cluster's GPU speed table scales it for other GPUs).

Task ids become step names that satisfy ``NAME_RE`` (lowercase, at most 63 characters);
the original id and category stay in each step's ``env`` (``WFCOMMONS_TASK``,
``WFCOMMONS_CATEGORY``).  Every step runs a placeholder (``PLACEHOLDER_IMAGE``, ``true``):
the result is for planning, not for running the real tools.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from hetflow.errors import Problem, SpecError
from hetflow.spec.fields.resources import MIN_MEMORY
from hetflow.spec.models import NAME_RE, Workflow

PLACEHOLDER_IMAGE = "localhost/hetflow-examples/numpy:latest"
PLACEHOLDER_COMMAND = ("true",)
GPU_SPEEDUP = 8.5  # bench rule 3: the A100 speed-up of the Caffe table in the Mesos GPU talk
GPU_SHARE = 0.20  # bench rule 3: a category with at least this share of the total gets a GPU variant
GPU_CORES = 2
DEFAULT_MEMORY = 1024**3  # bench rule 2: 1 GiB where memoryInBytes is absent
_CATEGORY_RE = re.compile(r"_ID\d+\Z")


@dataclass(frozen=True)
class TraceTask:
    """One task of a trace, with what the bench rules read from it."""

    id: str
    category: str
    runtime: float  # seconds at speed 1.0
    cores: float
    memory: int
    parents: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Trace:
    name: str
    tasks: tuple[TraceTask, ...]
    sizes: Mapping[str, int]  # file id -> bytes


def category_of(name: str) -> str:
    """``individuals_ID0000001`` -> ``individuals`` (bench rule 2)."""
    return _CATEGORY_RE.sub("", name)


def read_trace(data: Mapping[str, Any], file: str = "<trace>") -> Trace:
    """The tasks, dependencies and file sizes of a WfFormat 1.5 document (a parsed JSON).

    Raises SpecError naming the JSON field when the document is not WfFormat 1.5-shaped."""

    def bad(where: str, what: str) -> SpecError:
        return SpecError([Problem(file, 1, f"{where}: {what} (expected WfFormat 1.5, as in WfInstances)")])

    wf = data.get("workflow") if isinstance(data, Mapping) else None
    spec = wf.get("specification") if isinstance(wf, Mapping) else None
    execution = wf.get("execution") if isinstance(wf, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(execution, Mapping):
        raise bad("workflow", "needs 'specification' and 'execution' objects")
    spec_tasks, exec_tasks = spec.get("tasks"), execution.get("tasks")
    if not isinstance(spec_tasks, list) or not spec_tasks:
        raise bad("workflow.specification.tasks", "missing or empty")
    if not isinstance(exec_tasks, list):
        raise bad("workflow.execution.tasks", "missing")
    sizes: dict[str, int] = {}
    for i, f in enumerate(spec.get("files") or []):
        if not isinstance(f, Mapping) or not isinstance(f.get("id"), str):
            raise bad(f"workflow.specification.files[{i}]", "needs an 'id'")
        sizes[f["id"]] = int(f.get("sizeInBytes") or 0)
    measured: dict[str, Mapping[str, Any]] = {}
    for i, t in enumerate(exec_tasks):
        if not isinstance(t, Mapping) or not isinstance(t.get("id"), str):
            raise bad(f"workflow.execution.tasks[{i}]", "needs an 'id'")
        measured[t["id"]] = t
    tasks: list[TraceTask] = []
    seen: set[str] = set()
    for i, t in enumerate(spec_tasks):
        where = f"workflow.specification.tasks[{i}]"
        if not isinstance(t, Mapping) or not isinstance(t.get("id"), str):
            raise bad(where, "needs an 'id'")
        tid = t["id"]
        if tid in seen:
            raise bad(where, f"task id {tid!r} appears twice")
        seen.add(tid)
        m = measured.get(tid)
        if m is None or not isinstance(m.get("runtimeInSeconds"), int | float):
            raise bad(where, f"task {tid!r} has no execution entry with 'runtimeInSeconds'")
        cores = m.get("coreCount")
        memory = m.get("memoryInBytes")
        tasks.append(
            TraceTask(
                id=tid,
                category=category_of(str(t.get("name") or tid)),
                runtime=max(float(m["runtimeInSeconds"]), 0.0),
                cores=float(cores) if isinstance(cores, int | float) and cores > 0 else 1.0,
                memory=int(memory) if isinstance(memory, int | float) and memory > 0 else DEFAULT_MEMORY,
                parents=tuple(t.get("parents") or ()),
                inputs=tuple(dict.fromkeys(t.get("inputFiles") or ())),
                outputs=tuple(dict.fromkeys(t.get("outputFiles") or ())),
            )
        )
    for i, task in enumerate(tasks):
        for p in task.parents:
            if p not in seen:
                raise bad(f"workflow.specification.tasks[{i}].parents", f"names unknown task {p!r}")
    return Trace(str(data.get("name") or "wfcommons"), tuple(tasks), sizes)


def gpu_categories(tasks: Sequence[TraceTask]) -> tuple[str, ...]:
    """Bench rule 3: the category with the largest total run time, and every other with at
    least ``GPU_SHARE`` of the whole workflow's run time; largest first."""
    totals: dict[str, float] = {}
    for t in tasks:
        totals[t.category] = totals.get(t.category, 0.0) + t.runtime
    if not totals:
        return ()
    grand = sum(totals.values())
    ranked = sorted(totals, key=lambda c: -totals[c])  # stable: ties keep trace order
    return (ranked[0], *(c for c in ranked[1:] if totals[c] >= GPU_SHARE * grand))


def workflow_data(data: Mapping[str, Any], *, gpu_variants: bool = True, file: str = "<trace>") -> dict[str, Any]:
    """The hetflow workflow of a trace, as the plain mapping a workflow file holds."""
    trace = read_trace(data, file)
    names = step_names([t.id for t in trace.tasks])
    paths = _file_paths([f for t in trace.tasks for f in (*t.outputs, *t.inputs)])
    gpu_cats = set(gpu_categories(trace.tasks)) if gpu_variants else set()
    writes = {t.id: set(t.outputs) for t in trace.tasks}
    steps: dict[str, Any] = {}
    for t in trace.tasks:
        step: dict[str, Any] = {}
        # a trace's measured peak can be below what podman accepts as a limit (6 MiB)
        memory = max(t.memory, MIN_MEMORY)
        cpu = {"cpus": int(t.cores) if t.cores.is_integer() else t.cores, "memory": memory}
        if t.category in gpu_cats:
            step["variants"] = {
                "cpu": _variant(cpu, t.runtime),
                "gpu": _variant({"cpus": GPU_CORES, "memory": memory, "gpus": 1}, t.runtime / GPU_SPEEDUP),
            }
        else:
            step.update(_variant(cpu, t.runtime))
        step["env"] = {"WFCOMMONS_TASK": t.id, "WFCOMMONS_CATEGORY": t.category}
        needs: list[str] = []
        inputs: dict[str, str] = {}
        for p in dict.fromkeys(t.parents):
            read = [f for f in t.inputs if f in writes[p]]
            if not read:
                needs.append(names[p])
            for f in read:
                inputs[_input_key(paths[f], inputs)] = f"{names[p]}/{paths[f]}"
        if needs:
            step["needs"] = needs
        if inputs:
            step["inputs"] = inputs
        if t.outputs:
            step["outputs"] = [paths[f] for f in t.outputs]
            step["sizes"] = {paths[f]: trace.sizes.get(f, 0) for f in t.outputs}
        steps[names[t.id]] = step
    return {"apiVersion": "hetflow/v1", "name": _name(trace.name, "wfcommons"), "steps": steps}


def workflow_from_wfcommons(data: Mapping[str, Any], *, gpu_variants: bool = True, file: str = "<trace>") -> Workflow:
    """The trace as a validated ``Workflow`` model."""
    return _validated(workflow_data(data, gpu_variants=gpu_variants, file=file), file)


def _validated(wf: dict[str, Any], file: str) -> Workflow:
    try:
        return Workflow.model_validate(wf)
    except ValidationError as exc:  # a bug in the conversion, reported with the trace's name
        raise SpecError([Problem(file, 1, f"conversion gave an invalid workflow: {exc}")]) from None


def convert_wfcommons(data: Mapping[str, Any], *, gpu_variants: bool = True, file: str = "<trace>") -> str:
    """The trace as workflow YAML text (what ``hetflow import wfcommons TRACE.json`` prints)."""
    wf = workflow_data(data, gpu_variants=gpu_variants, file=file)
    _validated(wf, file)  # fail here, not in the user's next command
    rule = "GPU variants per shared/bench/README.md rule 3" if gpu_variants else "CPU variants only"
    header = (
        f"# Converted from the WfFormat trace {data.get('name', file)!r} for planning ({rule}).\n"
        "# Steps run a placeholder; WFCOMMONS_TASK in each step's env is the trace's task id.\n"
    )
    return header + yaml.safe_dump(wf, sort_keys=False, width=120, allow_unicode=True)


def _variant(resources: dict[str, Any], estimate: float) -> dict[str, Any]:
    return {
        "image": PLACEHOLDER_IMAGE,
        "command": list(PLACEHOLDER_COMMAND),
        "resources": resources,
        "estimate": estimate,
    }


# --- names ------------------------------------------------------------------------------


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _name(raw: str, fallback: str) -> str:
    """A NAME_RE-valid name for ``raw``: lowercase, other characters as '-', at most 63
    characters (a long one keeps a digest of the original so two stay apart)."""
    name = re.sub(r"[^a-z0-9_-]+", "-", raw.lower()).strip("-_") or fallback
    if len(name) > 63:
        name = name[:54].rstrip("-_") + "-" + _digest(raw)
    assert NAME_RE.match(name), name
    return name


def step_names(ids: Sequence[str]) -> dict[str, str]:
    """Task id -> step name, deterministic and one-to-one; a clash (two ids that differ
    only in case or punctuation) gets the original's digest appended."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for tid in ids:
        name = _name(tid, "task")
        if name in used:
            name = name[:54].rstrip("-_") + "-" + _digest(tid)
            n = 2
            while name in used:  # a digest clash: practically never
                name = f"{name[:60]}-{n}"
                n += 1
        used.add(name)
        out[tid] = name
    return out


def _file_paths(files: Sequence[str]) -> dict[str, str]:
    """File id -> the relative path it gets in /out: the id when it is a plain file name,
    else with other characters as '_'; unique over the trace."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for f in dict.fromkeys(files):
        path = re.sub(r"[^A-Za-z0-9._-]", "_", f)
        if path.strip(".") == "" or path.startswith(".."):
            path = "f_" + path
        if path in used:
            path = f"{path}-{_digest(f)}"
        used.add(path)
        out[f] = path
    return out


def _input_key(path: str, taken: Mapping[str, str]) -> str:
    """An input name for a file: /in/<key> must be an identifier once '-' reads as '_'."""
    key = re.sub(r"[^A-Za-z0-9_-]", "_", path)
    if not key.replace("-", "_").isidentifier():
        key = "f_" + key
    base, n = key, 2
    while key in taken:
        key = f"{base}_{n}"
        n += 1
    return key
