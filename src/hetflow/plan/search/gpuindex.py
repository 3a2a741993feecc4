"""Which GPU indices the steps of an exact (CP-SAT) solution hold: the model decides counts
of GPUs per machine over time, not indices, so they are given out afterwards.
"""

from __future__ import annotations

from hetflow.errors import HetflowError
from hetflow.plan.search.compiled import Choice, Compiled


def gpu_indices(
    problem: Compiled, chosen: list[tuple[float, int, Choice, float, list[tuple[int, int]]]]
) -> dict[tuple[int, int], tuple[int, ...]]:
    """By start time on each machine, the lowest GPU indices free at the start (interval-graph
    colouring: a GPU given at a start stays busy to the finish, so later starts avoid it);
    by (task, machine): a gang's replicas there take them in rank order."""
    free_at: dict[int, list[float]] = {}
    out: dict[tuple[int, int], tuple[int, ...]] = {}
    for start, t, ch, runtime, held in sorted(chosen, key=lambda x: (x[0], x[1])):
        for mach, k in held:
            g = ch.gpus * k
            if g == 0:
                out[(t, mach)] = ()
                continue
            busy = free_at.setdefault(mach, [0.0] * problem.classes[problem.machine_class[mach]].gpus)
            if runtime <= 0:
                out[(t, mach)] = tuple(range(g))
                continue
            ids = [i for i, until in enumerate(busy) if until <= start + 1e-9 * max(1.0, start)][:g]
            if len(ids) < g:  # cannot happen for a solution of the model; fail loudly if it does
                raise HetflowError(
                    f"internal error: no free GPU for task {problem.names[t]!r} on {problem.machine_name[mach]}"
                )
            for i in ids:
                busy[i] = start + runtime
            out[(t, mach)] = tuple(ids)
    return out
