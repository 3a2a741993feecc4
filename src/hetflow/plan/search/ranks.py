"""Orders and paths over a compiled problem, and a schedule as a ``Plan``: the HEFT upward
and downward ranks (Topcuoglu et al. 2002), PEFT's optimistic cost table (Arabnejad and
Barbosa 2014), a topological order, and of a finished schedule its critical path and each
task's latest finish (what the heuristic's local search kicks), and ``to_plan``.
"""

from __future__ import annotations

from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Placement, Plan
from hetflow.plan.search.compiled import Compiled
from hetflow.plan.search.listpass import Schedule


def topological(problem: Compiled) -> list[int]:
    return problem.order()


def lower_bounds(problem: Compiled) -> tuple[float, float]:
    """No schedule's makespan is below the longest chain of the tasks' fastest options with no
    transfer time (every start is at 0 or after its parents' finish), nor its cost below the
    sum of their cheapest options."""
    fastest = [min(ch.runtime for ch in chs) for chs in problem.choices]
    return max(upward_rank(problem, fastest, comm_scale=0.0), default=0.0), sum(problem.min_cost)


def mean_runtime(problem: Compiled) -> list[float]:
    return [sum(ch.runtime for ch in chs) / len(chs) for chs in problem.choices]


def upward_rank(problem: Compiled, weight: list[float], comm_scale: float = 1.0) -> list[float]:
    """rank_u(t) = w(t) + max over children c of (transfer time + rank_u(c))."""
    rank = [0.0] * problem.n
    for t in reversed(topological(problem)):
        rank[t] = weight[t] + max((comm * comm_scale + rank[c] for c, comm in problem.children[t]), default=0.0)
    return rank


def downward_rank(problem: Compiled, weight: list[float]) -> list[float]:
    """rank_d(t) = max over parents p of (rank_d(p) + w(p) + transfer time)."""
    rank = [0.0] * problem.n
    for t in topological(problem):
        rank[t] = max((rank[p] + weight[p] + comm for p, comm in problem.parents[t]), default=0.0)
    return rank


def optimistic_cost(problem: Compiled) -> list[tuple[float, ...]]:
    """PEFT's optimistic cost table, per class: OCT(t, c) = max over children s of the least,
    over the options of s, of OCT(s, its class) + its run time + the transfer if the class
    differs (Arabnejad and Barbosa 2014, eq. 1, with classes for processors)."""
    k = len(problem.classes)
    table: list[tuple[float, ...]] = [()] * problem.n
    # Per task s and class c: the least OCT(s, its class) + run time over the options of s on
    # c (inf: none there), so that an edge costs k steps, not k x options.  Adding the
    # transfer after the least is the same float as adding it to each (addition is monotone).
    least: list[list[float]] = [[]] * problem.n
    inf = float("inf")
    for t in reversed(topological(problem)):
        row = [0.0] * k
        for s, comm in problem.children[t]:
            on = least[s]
            at = on.index(min(on))  # the best class for s, and the best of the others
            second = min((x for c, x in enumerate(on) if c != at), default=inf)
            for c in range(k):
                other = (second if c == at else on[at]) + comm  # the best on another class, moved
                best = on[c] if on[c] <= other else other
                if best > row[c]:
                    row[c] = best
        table[t] = tuple(row)
        here = [inf] * k
        for ch in problem.choices[t]:
            x = table[t][ch.cls] + ch.runtime
            if x < here[ch.cls]:
                here[ch.cls] = x
        least[t] = here
    return table


def rounded(values: list[float]) -> list[float]:
    """Ranks equal on paper may differ in the last bit; round so that ties go by task order."""
    return [float(f"{v:.12g}") for v in values]


def latest_finish(problem: Compiled, s: Schedule) -> list[float]:
    """How late each task could finish, its machines and run times as in ``s``, and the rest
    of ``s`` shifted as needed, without delaying the end (contention ignored: a bound)."""
    latest = [s.makespan] * problem.n
    for t in reversed(topological(problem)):
        for c, comm in problem.children[t]:
            gap = 0.0 if s.machine[c] == s.machine[t] else comm
            latest[t] = min(latest[t], latest[c] - (s.finish[c] - s.start[c]) - gap)
    return latest


def critical_path(problem: Compiled, s: Schedule) -> list[int]:
    """The chain of tasks that ends with the last finish: each one waits for the previous one,
    either for its data or for room on its machine."""
    if problem.n == 0:
        return []
    ends: dict[tuple[int, float], int] = {}
    for t in range(problem.n):
        ends.setdefault((s.machine[t], s.finish[t]), t)
    t = max(range(problem.n), key=lambda u: (s.finish[u], -u))
    chain = [t]
    while s.start[t] > 0.0 and len(chain) <= problem.n:
        nxt = None
        for p, comm in problem.parents[t]:
            arrival = s.finish[p] + (0.0 if s.machine[p] == s.machine[t] else comm)
            if arrival == s.start[t]:
                nxt = p
                break
        if nxt is None:
            nxt = ends.get((s.machine[t], s.start[t]))
        if nxt is None:
            break
        t = nxt
        chain.append(t)
    return chain


def to_plan(problem: Compiled, s: Schedule, *, algorithm: str, objective: str) -> Plan:
    placements: dict[str, Placement] = {}
    for t, task in enumerate(problem.instance.tasks):
        ch = s.choice[t]
        option = task.options[ch.index]
        placements[task.name] = Placement(
            task=task.name,
            variant=option.variant,
            machine=problem.machine_name[s.machine[t]],
            machine_class=option.machine_class,
            start=s.start[t],
            finish=s.finish[t],
            cores=option.cores,
            memory=option.memory,
            gpus=s.gpus[t],
            ranks=tuple((problem.machine_name[m], g) for m, g in s.ranks[t]) if s.ranks and s.ranks[t] else (),
            share=ch.slot.share if ch.slot is not None else 0.0,
            mig_device=s.mig_of(t),
        )
    makespan = max((p.finish for p in placements.values()), default=0.0)
    return Plan(placements, makespan, plan_cost(problem.instance, placements), algorithm, objective)


def with_notes(plan: Plan, deadline: float | None, budget: float | None) -> Plan:
    """The plan with a note where it misses the deadline or the budget it was asked to keep."""
    notes = list(plan.notes)
    if deadline is not None and plan.makespan > deadline * (1 + 1e-12):
        notes.append(
            f"deadline not met: the best plan found takes {plan.makespan:g} s, over the deadline of "
            f"{deadline:g} s; allow more time or add machines"
        )
    if budget is not None and plan.cost > budget * (1 + 1e-12):
        notes.append(
            f"budget not met: the plan found closest to it costs ${plan.cost:.4f}, over the budget of "
            f"${budget:.4f}; raise the budget or use cheaper nodes"
        )
    if not notes:
        return plan
    return Plan(plan.placements, plan.makespan, plan.cost, plan.algorithm, plan.objective, plan.optimal, tuple(notes))
