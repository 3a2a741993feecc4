"""Why a plan chose what it chose, as plain frozen values (``report`` renders them).

For one step: every (variant, node class) the filters rejected, with the filter's reason,
then every feasible option that lost to the chosen one, with why it lost.  A ``gpu_share``
step's other kind on the chosen class (a share when it took a whole GPU, or the reverse)
is explained by finish times, load and slowdown (``plan.search.sharewhy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hetflow.plan.instance import Instance, Plan
from hetflow.plan.search.sharewhy import share_reason

_EPS = 1e-9


@dataclass(frozen=True)
class Verdict:
    """One (variant, node class) that is not the step's placement, and why."""

    variant: str
    node_class: str
    verdict: Literal["rejected", "lost"]
    reason: str


def explain(plan: Plan, instance: Instance, step: str) -> tuple[Verdict, ...]:
    """Filter rejections with their reasons, then feasible options scored against the
    chosen one (by run time there; the schedule as a whole decided the rest)."""
    chosen = plan.placements[step]
    task = instance.task(step)
    chosen_rt = chosen.finish - chosen.start
    out = [Verdict(r.variant, r.machine_class, "rejected", r.reason) for r in task.rejected]
    for o in task.options:
        same = o.variant == chosen.variant and o.machine_class == chosen.machine_class
        if same and (o.share > 0) != (chosen.share > 0) and not o.mig:
            out.append(Verdict(o.variant, o.machine_class, "lost", share_reason(plan, instance, step, o)))
            continue
        if same:
            continue
        if o.runtime > chosen_rt + _EPS:
            why = f"runs {o.runtime:.4g}s there vs {chosen_rt:.4g}s for the choice"
        elif o.runtime < chosen_rt - _EPS:
            why = (
                f"faster there ({o.runtime:.4g}s vs {chosen_rt:.4g}s) but the schedule finishes sooner or cheaper "
                "with the choice (its nodes were busy, its data were elsewhere, or the GPU policy kept it off)"
            )
        else:
            why = "as fast there; the choice finished no later (ties go to the earlier node class)"
        out.append(Verdict(o.variant, o.machine_class, "lost", why))
    return tuple(out)
