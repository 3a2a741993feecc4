"""Checks of a whole workflow that no single model can make: the DAG, data paths,
reserved environment variables.  Each returns Problems; nothing raises."""

from __future__ import annotations

import difflib
import functools
import posixpath
import re
from collections.abc import Callable

from hetflow.errors import Problem
from hetflow.spec.fields.imageref import ReferenceSyntaxError, parse_reference
from hetflow.spec.fields.naming import DATA_PREFIX, fanout_parent
from hetflow.spec.models import ENV_NAME, Workflow, target_problem
from hetflow.spec.validate.dag import children, find_cycle
from hetflow.spec.validate.envsecrets import env_credential_note
from hetflow.spec.validate.when import when_problems

LineOf = Callable[[tuple[str | int, ...]], int]

CHECKPOINT_ENV = "HETFLOW_CHECKPOINT_DIR"  # a step's own folder, with checkpoint: {mode: app}
# Set by hetflow for every container; a user's value would widen or confuse the GPU set
# (NVIDIA_VISIBLE_DEVICES=all is what nvidia-container-runtime reads) or preload code.
RESERVED_ENV = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "LD_PRELOAD",
        "HETFLOW_GPU_UUIDS",
        "HETFLOW_GPU_SHARE",
        "HETFLOW_GPU_SHARING",
        "HETFLOW_MIG_UUID",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ZE_AFFINITY_MASK",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_MPS_PIPE_DIRECTORY",
        "HETFLOW_RUN_ID",
        "HETFLOW_STEP",
        "HETFLOW_ATTEMPT",
        CHECKPOINT_ENV,
        "HOME",
    }
)
# What every replica of a gang step is told (torchrun's names, MPI's ranks, hetflow's own).
GANG_ENV = frozenset(
    {
        "HETFLOW_RANK",
        "HETFLOW_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
    }
)


def check_workflow(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_needs(wf, file, line_of)
    problems += _check_paths(wf, file, line_of)
    problems += _check_optional(wf, file, line_of)
    problems += _check_env(wf, file, line_of)
    problems += _check_gang(wf, file, line_of)
    problems += _check_images(wf, file, line_of)
    problems += when_problems(wf, file, line_of)
    problems += env_credential_note(wf, file, line_of)
    return problems


def _check_images(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    """An image filled in from a template (a param, a fan-out item's value) must parse as
    podman would parse it (the models check every image written as it is when the file is
    read); each distinct image is parsed once."""
    problems = []
    bad: dict[str, str | None] = {}
    for name, step in wf.steps.items():
        for v, var in step.resolved_variants().items():
            if "{{" in var.image:
                continue
            if var.image not in bad:
                try:
                    parse_reference(var.image)
                    bad[var.image] = None
                except ReferenceSyntaxError as exc:
                    bad[var.image] = str(exc)
            why = bad[var.image]
            if why is not None:
                where = ("steps", name, "image") if step.variants is None else ("steps", name, "variants", v, "image")
                problems.append(Problem(file, line_of(where), f"step {name!r}: {why}"))
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
            elif dep not in wf.steps and not _pending_item(wf, dep):
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


@functools.lru_cache(maxsize=8192)  # pure; a big workflow repeats its paths (o.txt, s1/o.txt)
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
            problems += _check_input(wf, name, key, ref, file, lambda loc=loc: line_of(loc))  # type: ignore[misc]
        problems += _check_publish(wf, name, file, line_of)
        problems += _check_source(wf, name, file, line_of)
    return problems


_GATHER_KEY = re.compile(r"^(?P<key>[^/]+)/[0-9]+$")  # k/i: item i of a gathered fan-out


def _check_input(wf: Workflow, name: str, key: str, ref: str, file: str, at: Callable[[], int]) -> list[Problem]:
    """(``at`` gives the line: computed only for a problem.)"""
    gathered = _GATHER_KEY.match(key)
    bare = gathered.group("key") if gathered else key
    if not bare.replace("-", "_").isidentifier():
        return [
            Problem(
                file, at(), f"input name {key!r} of step {name!r} becomes /in/{key}; use letters, digits, '-' or '_'"
            )
        ]
    if "{{" in ref:
        return []  # a pending fan-out's item: checked when it is expanded
    if ref.startswith(DATA_PREFIX):
        dname, _, path = ref.removeprefix(DATA_PREFIX).partition("/")
        if dname not in wf.data:
            declared = ", ".join(wf.data) or "none"
            return [
                Problem(
                    file,
                    at(),
                    f"input {key!r} of step {name!r} reads {ref!r}: no data {dname!r}{_hint(dname, wf.data)} "
                    f"is declared under 'data' (declared: {declared})",
                )
            ]
        why = _bad_path(path) if path else None
        return [Problem(file, at(), f"input {key!r} of step {name!r}: path {path!r} {why}")] if why else []
    parent, _, path = ref.partition("/")
    if not path:
        return [
            Problem(
                file,
                at(),
                f"input {key!r} of step {name!r} is {ref!r}; write STEP/OUTPUT (e.g. generate/matrix.npy) "
                "or data.NAME for workflow data",
            )
        ]
    why = _bad_path(path)
    if why:
        return [Problem(file, at(), f"input {key!r} of step {name!r}: path {path!r} {why}")]
    if parent == name:
        return [Problem(file, at(), f"input {key!r} of step {name!r} reads the step's own output {path!r}")]
    if _pending_item(wf, parent):
        return []
    if parent not in wf.steps:
        return [
            Problem(
                file,
                at(),
                f"input {key!r} of step {name!r} reads from unknown step {parent!r}{_hint(parent, wf.steps)}",
            )
        ]
    if not _declares(wf.steps[parent].outputs, path):
        listed = ", ".join(wf.steps[parent].outputs) or "none"
        return [
            Problem(
                file,
                at(),
                f"input {key!r} of step {name!r} reads {path!r}, which step {parent!r} "
                f"does not declare in 'outputs' (it declares: {listed})",
            )
        ]
    return []


def _pending_item(wf: Workflow, name: str) -> bool:
    """``X.i`` of a fan-out ``X`` still pending (its items exist once its list is known)."""
    parent = fanout_parent(name)
    return parent is not None and parent in wf.steps and wf.steps[parent].foreach is not None


@functools.lru_cache(maxsize=8192)  # pure, and a big workflow asks the same few questions
def _declares(outputs: tuple[str, ...], path: str) -> bool:
    """``path`` is a declared output, a directory holding one, or a file inside a declared directory."""
    if any("{{" in o for o in outputs):
        return True  # a pending fan-out's templated outputs
    want = posixpath.normpath(path)
    declared = [posixpath.normpath(o) for o in outputs]
    return any(want == o or o.startswith(want + "/") or want.startswith(o + "/") for o in declared)


def _check_publish(wf: Workflow, name: str, file: str, line_of: LineOf) -> list[Problem]:
    problems = []
    step = wf.steps[name]
    for i, pub in enumerate(step.publish):
        why = target_problem(pub.to, pub.mode)
        if why:
            problems.append(Problem(file, line_of(("steps", name, "publish", i, "to")), f"step {name!r}: {why}"))
        for out in pub.outputs:
            if "{{" not in out and not _declares(step.outputs, out):
                listed = ", ".join(step.outputs) or "none"
                problems.append(
                    Problem(
                        file,
                        line_of(("steps", name, "publish", i, "outputs")),
                        f"step {name!r} publishes {out!r}, which is not in its outputs (declared: {listed})",
                    )
                )
        if not pub.outputs and not step.outputs:
            problems.append(
                Problem(
                    file,
                    line_of(("steps", name, "publish", i)),
                    f"step {name!r} publishes its outputs but declares none; add 'outputs'",
                )
            )
    return problems


def _check_source(wf: Workflow, name: str, file: str, line_of: LineOf) -> list[Problem]:
    """A pending fan-out's list must come from declared data or a declared output."""
    f = wf.steps[name].foreach
    if not (isinstance(f, dict) and len(f) == 1):
        return []
    kind, ref = next(iter(f.items()))
    if kind not in ("files", "lines") or not isinstance(ref, str):
        return []
    line = line_of(("steps", name, "foreach"))
    if ref.startswith(DATA_PREFIX):
        dname = ref.removeprefix(DATA_PREFIX).partition("/")[0]
        if dname not in wf.data:
            return [
                Problem(
                    file,
                    line,
                    f"foreach {kind} of step {name!r} reads {ref!r}: no data {dname!r}{_hint(dname, wf.data)}",
                )
            ]
        return []
    parent, _, path = ref.partition("/")
    if _pending_item(wf, parent):
        return []
    if parent == name or parent not in wf.steps:
        return [
            Problem(
                file,
                line,
                f"foreach {kind} of step {name!r} reads {ref!r}: no step {parent!r}{_hint(parent, wf.steps)}",
            )
        ]
    if not _declares(wf.steps[parent].outputs, path):
        return [
            Problem(
                file,
                line,
                f"foreach {kind} of step {name!r} reads {path!r}, which step {parent!r} does not declare in 'outputs'",
            )
        ]
    return []


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
                if not ENV_NAME.match(key):
                    # podman --env K=V splits at the first '=': a key 'LD_PRELOAD=/x.so' would
                    # set LD_PRELOAD past the reserved-variable guard, so only plain names pass.
                    problems.append(
                        Problem(
                            file,
                            line_of((*loc, key)),
                            f"step {name!r}: env key {key!r} is not a variable name; use letters, digits "
                            "and '_', not starting with a digit (no '=', not empty)",
                        )
                    )
                    continue
                if step.gang is not None and key in GANG_ENV:
                    problems.append(
                        Problem(
                            file,
                            line_of((*loc, key)),
                            f"step {name!r} sets {key}, which hetflow sets for every replica of its gang "
                            f"(launcher: {step.gang.launcher}); the value is ignored",
                            "note",
                        )
                    )
                if key == CHECKPOINT_ENV:
                    problems.append(
                        Problem(
                            file,
                            line_of((*loc, key)),
                            f"step {name!r} sets {key}, which hetflow sets itself: drop it from env and write "
                            "checkpoint: {mode: app}; the step then finds its own folder there, kept across attempts",
                        )
                    )
                elif key in RESERVED_ENV:
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


def _check_gang(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    """What the models cannot say alone: a gang's GPU link needs GPUs to link."""
    problems = []
    for name, step in wf.steps.items():
        gang = step.gang
        if gang is None:
            continue
        sliced = [v for v, var in step.resolved_variants().items() if not var.resources.gpu_request.whole]
        if sliced:
            problems.append(
                Problem(
                    file,
                    line_of(("steps", name, "gang")),
                    f"step {name!r}: a gang's replicas take whole GPUs, but variant(s) "
                    f"{', '.join(repr(v) for v in sliced)} ask for gpu_share or gpu_mig; "
                    "use resources.gpus: N for a gang, or drop the gang",
                )
            )
        if gang.gpu_link == "any":
            continue
        few = [v for v, var in step.resolved_variants().items() if var.resources.gpus < 2]
        if gang.gpu_link == "nvlink" and few:
            problems.append(
                Problem(
                    file,
                    line_of(("steps", name, "gang", "gpu_link")),
                    f"step {name!r}: gpu_link: nvlink joins a replica's own GPUs, but variant(s) "
                    f"{', '.join(repr(v) for v in few)} ask for fewer than 2 GPUs per replica; "
                    "ask for resources.gpus >= 2 or drop gpu_link",
                )
            )
    return problems
