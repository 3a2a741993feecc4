"""``hetflow resume`` looks at the run's data again (issue 37: what ran is what was hashed).

A run's host data is read where it lies, so a user may edit it between a failure and the
resume.  Resume lists and hashes the data again (``data.watch``: only files whose stat moved
are read), and a succeeded step whose data inputs differ from those its result was made from
(``Store.result_inputs``), or that ran while they changed, runs again with everything after it,
as an edit of the workflow file would make it (``amend.compare_data``).  ``run`` and ``run
--dry-run`` hash the data as it is when they start, so the three agree.  The data found is kept
with the run's plan, for the executor to mount and key with.
"""

from __future__ import annotations

from hetflow.execute.data.watch import DataWatch
from hetflow.execute.submit.amend import Amendment, compare_data
from hetflow.execute.submit.runplan import RunPlan, keep_data
from hetflow.spec import Workflow
from hetflow.state import InputsSeen, Store


def rehash_for_resume(store: Store, run_id: str, workflow: Workflow) -> Amendment:
    """The steps the run's data as it is now sends back to pending, and what changed in it."""
    text = store.plan_json(run_id)
    plan = RunPlan.from_json(text) if text is not None else RunPlan()
    if not plan.data.sets:
        return Amendment()
    watch = DataWatch(plan.data, workflow.data, store)
    now: dict[str, dict[str, str]] = {}
    for name, step in workflow.steps.items():
        try:
            look = watch.look(step)
        except KeyError:
            continue  # a data set the run did not record (refused with the edit that added it)
        if look is not None:
            now[name] = dict(look.digests)
    made_from = store.result_inputs(run_id)
    for name, digests in now.items():
        if name not in made_from:
            # a result recorded without its inputs (an older hetflow; a crash between the two):
            # the data as the run last found it
            made_from[name] = InputsSeen(_recorded(plan, digests))
    amendment = compare_data(workflow, store.steps(run_id), now, made_from, watch.found)
    said = watch.said()
    if said:
        keep_data(store, run_id, watch.manifest)
    return Amendment(amendment.changes, tuple(said))


def _recorded(plan: RunPlan, refs: dict[str, str]) -> dict[str, str]:
    out = {}
    for ref in refs:
        try:
            out[ref] = plan.data.digest(ref)
        except KeyError:
            continue
    return out
