"""A step's ``when:`` at its turn (``spec.validate.when``): decided once the outputs it reads exist,
its verdict recorded as the step's state."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hetflow.execute.data.paths import RunPaths
from hetflow.spec import CONDITION_MAX_BYTES, SKIPPED_BY_CONDITION, ConditionError, Workflow, evaluate, output_refs
from hetflow.state import FAILED, SKIPPED, SUCCEEDED, StepRecord, Store


def condition_holds(
    store: Store,
    run_id: str,
    wf: Workflow,
    paths: RunPaths,
    name: str,
    steps: Mapping[str, StepRecord],
    clock: Callable[[], float],
) -> bool:
    """Whether step ``name`` may launch: its condition holds.  False while an output it reads
    is not there yet (its step has not succeeded: an engine that orders jobs may have it
    submitted only); a false condition skips the step, one that cannot be evaluated fails
    it, each with the reason."""
    text = wf.steps[name].when
    assert text is not None
    if any(steps[r.split("/", 1)[0]].state != SUCCEEDED for r in output_refs(text)):
        return False
    try:
        holds = evaluate(text, wf.params, lambda ref: read_output(paths, ref))
    except (ConditionError, OSError) as exc:
        why = f"when: {exc}"
        store.set_step(run_id, name, state=FAILED, ended=clock(), reason=why, event=why)
        return False
    if not holds:
        why = f"{SKIPPED_BY_CONDITION}when: {text}"
        store.set_step(run_id, name, state=SKIPPED, ended=clock(), reason=why, event=f"skipped: {why}")
    return holds


def read_output(paths: RunPaths, ref: str) -> str:
    """An upstream step's output a condition reads (STEP/OUTPUT): its first bytes, as text."""
    parent, _, rel = ref.partition("/")
    with (paths.step_out(parent) / rel).open("rb") as f:
        return f.read(CONDITION_MAX_BYTES).decode(errors="replace")
