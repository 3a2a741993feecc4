"""A user's say over variant choice from the command line: ``--variant STEP=NAME`` forces a
variant, ``--prefer gpu|cpu`` biases every step with both kinds (pure).

Both work on the workflow the planner and the local chooser are given: a forced step keeps
only its named variant; a preferred kind is kept alone where some variant of that kind can
ever run (``can_run``), else the step is left as written, so a preference never makes a
step impossible.  The reason of each steered step ("forced by --variant", "preferred by
--prefer cpu") is what ``hetflow plan --explain`` and ``hetflow show``'s WHY column say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hetflow.errors import UsageError
from hetflow.spec import Step, Variant, Workflow, did_you_mean, fanout_parent

PREFER = ("gpu", "cpu")


@dataclass(frozen=True)
class Steer:
    """``variants``: step -> the variant forced; ``prefer``: "gpu", "cpu" or None."""

    variants: Mapping[str, str] = field(default_factory=dict)
    prefer: str | None = None

    def __bool__(self) -> bool:
        return bool(self.variants) or self.prefer is not None


def parse_steer(variant: Sequence[str], prefer: str | None) -> Steer:
    """The command line's ``--variant STEP=NAME`` (repeatable) and ``--prefer``."""
    forced: dict[str, str] = {}
    for item in variant:
        step, sep, name = item.partition("=")
        if not sep or not step.strip() or not name.strip():
            raise UsageError(f"--variant {item!r}: write STEP=VARIANT, e.g. --variant train=cpu")
        step, name = step.strip(), name.strip()
        if step in forced and forced[step] != name:
            raise UsageError(f"--variant names step {step!r} twice ({forced[step]} and {name}); give one")
        forced[step] = name
    if prefer is not None and prefer not in PREFER:
        raise UsageError(f"--prefer {prefer!r}: use gpu or cpu")
    return Steer(forced, prefer)


def _matches(forced: str, step: str) -> bool:
    """A step is forced by its own name, or a fan-out item by its step's (``train.3``: train)."""
    return step == forced or fanout_parent(step) == forced


def check_steer(workflow: Workflow, steer: Steer) -> None:
    """Every forced step and variant exists (UsageError listing the choices, exit 2)."""
    for sname, vname in steer.variants.items():
        steps = [s for s in workflow.steps if _matches(sname, s)]
        if not steps:
            names = sorted({fanout_parent(s) or s for s in workflow.steps})
            raise UsageError(
                f"--variant {sname}={vname}: workflow {workflow.name!r} has no step {sname!r}"
                f"{did_you_mean(sname, names)}; its steps: {', '.join(names)}"
            )
        have = list(workflow.steps[steps[0]].resolved_variants())
        if vname not in have:
            raise UsageError(
                f"--variant {sname}={vname}: step {sname!r} has no variant {vname!r}"
                f"{did_you_mean(vname, have)}; its variants: {', '.join(have)}"
            )


def _kind(v: Variant) -> str:
    return "gpu" if v.uses_gpu else "cpu"


def steer_workflow(
    workflow: Workflow, steer: Steer, can_run: Callable[[Step, Variant], bool]
) -> tuple[Workflow, dict[str, str]]:
    """The workflow with forced and preferred variants kept alone, and the reason per
    steered step.  ``can_run(step, variant)``: whether the variant can ever run where the
    workflow is planned (this machine, or some node class of the cluster)."""
    if not steer:
        return workflow, {}
    check_steer(workflow, steer)
    steps: dict[str, Step] = {}
    reasons: dict[str, str] = {}
    for sname, step in workflow.steps.items():
        variants = step.resolved_variants()
        forced = next((v for s, v in steer.variants.items() if _matches(s, sname)), None)
        keep: list[str] = []
        if forced is not None:
            if not can_run(step, variants[forced]):
                raise UsageError(
                    f"--variant {fanout_parent(sname) or sname}={forced}: variant {forced!r} of step {sname!r} "
                    f"can never run here; 'hetflow validate' (or 'hetflow plan --explain') says why. "
                    f"Its variants: {', '.join(variants)}"
                )
            keep, reasons[sname] = [forced], f"forced by --variant {fanout_parent(sname) or sname}={forced}"
        elif steer.prefer is not None and len({_kind(v) for v in variants.values()}) > 1:
            liked = [n for n, v in variants.items() if _kind(v) == steer.prefer and can_run(step, v)]
            if liked:
                keep, reasons[sname] = liked, f"preferred by --prefer {steer.prefer}"
        steps[sname] = _only(step, keep) if keep else step
    return workflow.model_copy(update={"steps": steps}), reasons


def _only(step: Step, keep: Sequence[str]) -> Step:
    if step.variants is None:
        return step  # one variant ('default'): nothing to choose
    return step.model_copy(update={"variants": {n: v for n, v in step.variants.items() if n in keep}})
