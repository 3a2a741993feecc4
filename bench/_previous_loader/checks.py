# Vendored verbatim from hetflow at commit 4aabbd9 (src/hetflow/spec/checks.py), imports rewritten to
# this folder: the loader as it was before the fast path, so bench/loader.py compares both in one run.
# ruff: noqa
# mypy: ignore-errors
"""Checks of a whole workflow that no single model can make: the DAG, data paths,
reserved environment variables.  Each returns Problems; nothing raises."""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Callable

from hetflow.errors import Problem
from bench._previous_loader.dag import children, find_cycle
from bench._previous_loader.models import Workflow

LineOf = Callable[[tuple[str | int, ...]], int]

# Set by hetflow for every container; a user's value would widen or confuse the GPU set
# (NVIDIA_VISIBLE_DEVICES=all is what nvidia-container-runtime reads) or preload code.
RESERVED_ENV = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "LD_PRELOAD",
        "HETFLOW_GPU_UUIDS",
        "HETFLOW_RUN_ID",
        "HETFLOW_STEP",
        "HETFLOW_ATTEMPT",
        "HOME",
    }
)


def check_workflow(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_needs(wf, file, line_of)
    problems += _check_paths(wf, file, line_of)
    problems += _check_optional(wf, file, line_of)
    problems += _check_env(wf, file, line_of)
    return problems


def edges_of(wf: Workflow) -> dict[str, list[str]]:
    return {name: list(step.dependencies()) for name, step in wf.steps.items()}


def _check_needs(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    problems = []
    for name, step in wf.steps.items():
        for i, dep in enumerate(step.needs):
            if dep == name:
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "needs", i)),
                        f"step {name!r} needs itself; remove it from 'needs'",
                    )
                )
            elif dep not in wf.steps:
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "needs", i)),
                        f"step {name!r} needs unknown step {dep!r}{_hint(dep, wf.steps)}",
                    )
                )
    cycle = find_cycle({n: [d for d in deps if d != n] for n, deps in edges_of(wf).items()})
    if cycle:
        problems.append(
            Problem(
                file,
                line_of(("steps", cycle[0])),
                "the steps form a cycle: "
                + " -> ".join(cycle)
                + " (each needs the next); break one of these dependencies",
            )
        )
    return problems


def _bad_path(path: str) -> str | None:
    if not path or path.startswith("/"):
        return "must be a relative path inside /out"
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../") or "/../" in f"/{path}/":
        return "must not contain '..'"
    return None


def _check_paths(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    problems = []
    for name, step in wf.steps.items():
        seen: set[str] = set()
        for i, out in enumerate(step.outputs):
            why = _bad_path(out)
            if why:
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "outputs", i)),
                        f"output {out!r} of step {name!r} {why}",
                    )
                )
            elif posixpath.normpath(out) in seen:
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "outputs", i)),
                        f"output {out!r} of step {name!r} is listed twice",
                    )
                )
            seen.add(posixpath.normpath(out))
        for out in step.sizes:
            if posixpath.normpath(out) not in seen:
                listed = ", ".join(step.outputs) or "none"
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "sizes", out)),
                        f"step {name!r} gives a size for {out!r}, which is not in its outputs (declared: {listed})",
                    )
                )
        for key, ref in step.inputs.items():
            loc = ("steps", name, "inputs", key)
            if not key.replace("-", "_").isidentifier():
                problems.append(
                    Problem(
                        file,
                        line_of(loc),
                        f"input name {key!r} of step {name!r} becomes /in/{key}; use letters, digits, '-' or '_'",
                    )
                )
            parent, _, path = ref.partition("/")
            if not path:
                problems.append(
                    Problem(
                        file,
                        line_of(loc),
                        f"input {key!r} of step {name!r} is {ref!r}; write STEP/OUTPUT, e.g. generate/matrix.npy",
                    )
                )
                continue
            why = _bad_path(path)
            if why:
                problems.append(Problem(file, line_of(loc), f"input {key!r} of step {name!r}: path {path!r} {why}"))
                continue
            if parent == name:
                problems.append(
                    Problem(file, line_of(loc), f"input {key!r} of step {name!r} reads the step's own output {path!r}")
                )
                continue
            if parent not in wf.steps:
                problems.append(
                    Problem(
                        file,
                        line_of(loc),
                        f"input {key!r} of step {name!r} reads from unknown step {parent!r}{_hint(parent, wf.steps)}",
                    )
                )
                continue
            declared = [posixpath.normpath(o) for o in wf.steps[parent].outputs]
            want = posixpath.normpath(path)
            if not any(want == o or o.startswith(want + "/") for o in declared):
                listed = ", ".join(wf.steps[parent].outputs) or "none"
                problems.append(
                    Problem(
                        file,
                        line_of(loc),
                        f"input {key!r} of step {name!r} reads {path!r}, which step {parent!r} "
                        f"does not declare in 'outputs' (it declares: {listed})",
                    )
                )
    return problems


def _check_optional(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    kids = children(edges_of(wf))
    return [
        Problem(
            file,
            line_of(("steps", name, "optional")),
            f"step {name!r} is optional but {', '.join(repr(k) for k in kids[name])} depend(s) on it; "
            "a skipped step would leave them without inputs",
        )
        for name, step in wf.steps.items()
        if step.optional and kids.get(name)
    ]


def _check_env(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    problems = []
    for name, step in wf.steps.items():
        envs: list[tuple[tuple[str | int, ...], dict[str, str]]] = [(("steps", name, "env"), step.env)]
        envs += [(("steps", name, "variants", v, "env"), var.env) for v, var in (step.variants or {}).items()]
        for loc, env in envs:
            for key in env:
                if key in RESERVED_ENV:
                    problems.append(
                        Problem(
                            file,
                            line_of((*loc, key)),
                            f"step {name!r} sets {key}, which hetflow sets itself "
                            "(GPU isolation and hardening); the value is ignored",
                            "note",
                        )
                    )
    return problems


def _hint(word: str, choices: object) -> str:
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1)  # type: ignore[attr-defined]
    return f" (did you mean {close[0]!r}?)" if close else ""
