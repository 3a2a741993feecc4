"""The list-scheduling planner: HEFT, then a portfolio of passes and a local search.

``heft(instance)`` is the algorithm of Topcuoglu, Hariri and Wu (IEEE TPDS 13(3), 2002):
tasks by decreasing upward rank (mean run time over the task's options, full transfer time
on every edge), each placed where it finishes first, inserted into the earliest gap that
holds it for its whole run time.  Here "where" is a variant *and* a machine, holding several
tasks at once when their cores, memory and GPUs fit (``timeline.py``, ``listpass.py``).

``plan_heuristic`` keeps the best of:

1. passes with several priority lists: upward rank; upward + downward rank (the CPOP
   priority, Topcuoglu et al. section 5); upward rank over the fastest options; upward rank
   with the mean transfer time over machine pairs;
2. PEFT passes (Arabnejad and Barbosa, IEEE TPDS 25(3), 2014): earliest finish plus the
   optimistic time the task's descendants still need from that class;
3. a lookahead pass that scores a choice by the earliest finish of the task's most critical
   child (small instances only: it places a child for every candidate);
4. for a cost objective or a budget: passes that spend by sub-deadlines or budget shares;
5. passes whose priorities are nudged, at random (from ``seed``) or by raising the tasks on
   the critical path of the previous nudged pass;
6. a local search: move one task to another option or machine (critical tasks first, or the
   dearest when cost is what matters), rebuild the schedule with every assignment fixed,
   keep the move if the plan improves; at a local optimum, kick two or three tasks at
   random from the best plan and go on.

Tie-breaking (``tie_break``).  Priorities are rounded to 12 digits so that ranks equal on
paper are equal here.  ``"hetflow"``, the default: among ready tasks of equal priority the one
with the longer mean run time goes first (then task order), and the rank passes are hetflow's
own.  ``"saga"``: equal priorities go in task order (topological), as anrg-saga's
``heft_rank_sort`` orders them, and the portfolio adds a pass with SAGA's upward rank (its
mean transfer time over every link, a node's link to itself included), so that on SAGA's
model hetflow's first passes reproduce SAGA's HEFT schedule (bench/planning/planner.py shows
both).  All of it runs within ``effort`` schedule builds, never a clock, so the same instance
and seed give the same plan (STYLE.md habit 1).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hetflow.errors import HetflowError
from hetflow.lazy import no_cyclic_gc
from hetflow.plan.instance import Instance, Plan
from hetflow.plan.search.compiled import Choice, Compiled
from hetflow.plan.search.listpass import ListPass, Schedule, build_fixed, pass_key
from hetflow.plan.search.ranks import (
    critical_path,
    downward_rank,
    latest_finish,
    lower_bounds,
    mean_runtime,
    optimistic_cost,
    rounded,
    to_plan,
    topological,
    upward_rank,
    with_notes,
)
from hetflow.plan.search.score import Rule

OBJECTIVES = ("makespan", "cost")
GPU_POLICIES = ("avoid", "allow")
TIE_BREAKS = ("hetflow", "saga")
DEFAULT_TIE_BREAK = "hetflow"  # "saga" copies anrg-saga's ordering; see the module docstring

# A list pass is costlier than a rebuild with fixed assignments (it tries every candidate):
# it counts as this many schedule builds against ``effort``.
_PASS_UNITS = 4
_LOOKAHEAD_UNITS = 16  # a lookahead pass also places the critical child of every candidate
_LOOKAHEAD_LIMIT = 20_000  # tasks x machines above which the lookahead pass is skipped
_STALE_KICKS = 25  # the local search stops after this many kicks without a new best
_NUDGE = 0.02  # a critical task's priority grows by up to this fraction of the top rank per pass
_WORK = 60_000  # placements' worth of work by default: under a second on a laptop core


def heft(instance: Instance) -> Plan:
    """Plain HEFT: upward rank, insertion, earliest finish time; no improvements.

    On the graph of Topcuoglu et al. (2002, Fig. 2) it gives the published makespan, 80."""
    with no_cyclic_gc():  # a pass allocates much and frees all of it: no cycles to look for
        problem = Compiled(instance)
        sched = ListPass(problem, Rule("eft", avoid=False), rounded(upward_rank(problem, mean_runtime(problem)))).run()
        return to_plan(problem, sched, algorithm="heft", objective="makespan")


def plan_heuristic(
    instance: Instance,
    *,
    objective: str = "makespan",
    deadline: float | None = None,
    budget: float | None = None,
    seed: int = 0,
    gpu_policy: str = "avoid",
    effort: int | None = None,
    tie_break: str = DEFAULT_TIE_BREAK,
) -> Plan:
    """The best plan found within ``effort`` schedule builds (default: scaled to the size).

    ``objective="makespan"`` minimizes the makespan, keeping ``plan.cost <= budget`` if a
    budget is given; ``objective="cost"`` minimizes the cost, keeping the makespan within
    ``deadline`` if given.  When the limit cannot be met, the plan that comes closest is
    returned and ``plan.notes`` says so (a deadline with the makespan objective, or a budget
    with the cost objective, is only checked and noted).  ``gpu_policy="avoid"`` keeps a task
    that uses no GPU off GPU nodes unless that makes it finish strictly earlier than on the
    best node without GPUs (decided when the task is placed; the local search moves such a
    task onto a GPU node only if it has no other class); "allow" has no such rule.

    ``effort`` counts schedule builds (a list pass counts 4, a lookahead pass 16, a rebuild
    with fixed assignments 1); by default it is set from the work of the first pass, so that
    the whole search does about as much as placing 60,000 tasks (see ``default_effort``).
    ``tie_break``: ``"hetflow"`` (default) or ``"saga"``, see the module docstring."""
    if objective not in OBJECTIVES:
        raise HetflowError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if gpu_policy not in GPU_POLICIES:
        raise HetflowError(f"gpu_policy {gpu_policy!r} is not one of {', '.join(GPU_POLICIES)}")
    if tie_break not in TIE_BREAKS:
        raise HetflowError(f"tie_break {tie_break!r} is not one of {', '.join(TIE_BREAKS)}")
    with no_cyclic_gc():  # as in ``heft``: 10,000 steps spent a tenth of their time in the collector
        problem = Compiled(instance)
        goal = Goal(objective, deadline, budget)
        search = Search(problem, goal, seed, gpu_policy == "avoid", effort, saga=tie_break == "saga")
        # a first plan at both lower bounds has the least key there is: as ``offer`` keeps a plan
        # only if strictly better, the portfolio and the local search would return it unchanged
        least_makespan, least_cost = lower_bounds(problem)
        if _tidy(search.best.makespan) > _tidy(least_makespan) or _tidy(search.best.cost) > _tidy(least_cost):
            search.portfolio()
            search.local_search()
        plan = to_plan(problem, search.best, algorithm="heuristic", objective=objective)
    return with_notes(plan, goal.deadline, goal.budget)


def default_effort(tasks: int, probes: int) -> int:
    """Schedule builds for a total work near ``_WORK`` task placements, given the work of one
    list pass: its ``tasks`` and its ``probes`` (a timeline searched costs about a sixth of a
    placement).  Many builds for small DAGs, a few passes for big ones, never under three."""
    per_pass = tasks + probes / 6
    return max(3 * _PASS_UNITS, min(2000, int(_PASS_UNITS * _WORK / max(1.0, per_pass))))


# --- objective ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    objective: str
    deadline: float | None
    budget: float | None

    def key(self, s: Schedule) -> tuple[float, float, float]:
        """Smaller is better: (how far past the limit, objective, the other measure)."""
        makespan, cost = _tidy(s.makespan), _tidy(s.cost)
        if self.objective == "cost":
            late = 0.0 if self.deadline is None else max(0.0, makespan - self.deadline)
            return (late, cost, makespan)
        over = 0.0 if self.budget is None else max(0.0, cost - self.budget)
        return (over, makespan, cost)

    def search_key(self, s: Schedule) -> tuple[float, ...]:
        """The local search's order: the goal's, except that for a makespan the sum of the
        finish times breaks ties before the cost does, so the search can cross plateaus where
        a move changes the makespan of nothing but shortens the others' chains."""
        key = self.key(s)
        spread = _tidy(sum(s.finish))
        if self.objective == "cost":
            return (*key, spread)
        return (key[0], key[1], spread, key[2])


def _tidy(x: float) -> float:
    """Float sums in different orders differ in the last bits; compare 12 digits."""
    return float(f"{x:.12g}")


# --- the search -----------------------------------------------------------------------------


class Search:
    """The portfolio of passes, then the local search, within ``effort`` schedule builds."""

    def __init__(
        self, problem: Compiled, goal: Goal, seed: int, avoid: bool, effort: int | None, *, saga: bool = False
    ) -> None:
        self.problem = problem
        self.saga = saga
        self.goal = goal
        self.rng = random.Random(seed)
        self.avoid = avoid
        self.left = 0 if effort is None else effort
        self.weight = mean_runtime(problem)
        self.rank = rounded(upward_rank(problem, self.weight))
        self.tiebreak = [0] * problem.n  # topological position: orders tasks that start together
        for i, t in enumerate(topological(problem)):
            self.tiebreak[t] = i
        # equal priorities: task order (SAGA's), or the longer mean run time first (hetflow's)
        self.pass_order: list[int] | None = None
        if not saga:
            self.pass_order = [0] * problem.n
            for i, t in enumerate(sorted(range(problem.n), key=lambda t: (-_tidy(self.weight[t]), t))):
                self.pass_order[t] = i
        self.best_rule = Rule("eft", avoid)
        first = ListPass(problem, self.best_rule, self.rank, self.pass_order)
        self.best: Schedule = first.run()
        self.best_key = goal.key(self.best)
        # the portfolio's passes by ``pass_key``: a pass that would repeat one gives its schedule
        self.passes = {pass_key(self.best_rule, self.rank, self.pass_order): self.best}
        if effort is None:
            self.left = default_effort(problem.n, first.probes)
        self.left -= _PASS_UNITS

    def run_pass(self, rule: Rule, priority: list[float]) -> Schedule:
        self.left -= _LOOKAHEAD_UNITS if rule.kind == "lookahead" else _PASS_UNITS
        return ListPass(self.problem, rule, priority, self.pass_order).run()

    def offer(self, s: Schedule) -> bool:
        key = self.goal.key(s)
        if key < self.best_key:
            self.best, self.best_key = s, key
            return True
        return False

    def portfolio(self) -> None:
        problem, goal, avoid = self.problem, self.goal, self.avoid
        ranks = [self.rank]
        ranks.append(rounded([u + d for u, d in zip(self.rank, downward_rank(problem, self.weight), strict=True)]))
        fastest = [min(ch.runtime for ch in chs) for chs in problem.choices]
        ranks.append(rounded(upward_rank(problem, fastest)))
        # The mean transfer time over machine pairs rather than the full one: (M-1)/M of a
        # pair of distinct machines; with tie_break="saga" also (M-1)/(M+1), over every link
        # counting a machine's own, as SAGA's HEFT does (anrg-saga, schedulers/cpop.py,
        # upward_rank): a copy of SAGA's ranking, not a rule of hetflow's own.
        if problem.m > 1:
            scales = (
                ((problem.m - 1) / problem.m, (problem.m - 1) / (problem.m + 1))
                if self.saga
                else ((problem.m - 1) / problem.m,)
            )
            for scale in scales:
                ranks.append(rounded(upward_rank(problem, self.weight, comm_scale=scale)))
        rules: list[tuple[Rule, list[float]]] = []
        if goal.objective == "cost":
            # The likeliest first: a big DAG has budget for only a few passes.
            due = self.deadline_rules()
            rules += [(rule, self.rank) for rule in due[:2]]
            rules.append((Rule("cheapest", avoid), self.rank))
            rules += [(rule, self.rank) for rule in due[2:] + self.spending_rules()]
        if goal.budget is not None:
            rules += [(rule, self.rank) for rule in self.budget_rules()]
            if goal.objective != "cost":
                rules.append((Rule("cheapest", avoid), self.rank))
        self.run_rules([*rules, *((Rule("eft", avoid), r) for r in ranks[1:])])
        if self.left >= _PASS_UNITS:  # PEFT's table (a pass's worth of work) only for a pass that runs
            table = optimistic_cost(problem)
            oct_rank = [sum(r[ch.cls] for ch in chs) / len(chs) for r, chs in zip(table, problem.choices, strict=True)]
            rules = [(Rule("peft", avoid, optimistic=tuple(table)), p) for p in (rounded(oct_rank), self.rank)]
            if problem.n * problem.m <= _LOOKAHEAD_LIMIT:
                rules += [(Rule("lookahead", avoid), r) for r in ranks[:2]]
            self.run_rules(rules)
        # Three quarters of what is left: passes whose priorities are nudged; the local search
        # gets the rest.
        self.nudged(3 * self.left // (4 * _PASS_UNITS))

    def run_rules(self, rules: list[tuple[Rule, list[float]]]) -> None:
        """A pass per rule, in order, each that the effort left affords; the best rule kept.
        A pass whose rule and task order are a pass's before (``pass_key``) builds the same
        schedule: it is not built again, and counts against the effort all the same."""
        for rule, priority in rules:
            units = _LOOKAHEAD_UNITS if rule.kind == "lookahead" else _PASS_UNITS
            if self.left < units:
                continue
            key = pass_key(rule, priority, self.pass_order)
            if key in self.passes:
                self.left -= units
                s = self.passes[key]
            else:
                s = self.passes[key] = self.run_pass(rule, priority)
            if self.offer(s):
                self.best_rule = rule

    def nudged(self, passes: int) -> None:
        """Passes with the best pass's rule and priorities nudged, in turn at random (by up to
        5, 15 or 30 %) and by raising the tasks on the critical path of the latest such pass
        (so that they are placed before the tasks that delayed them)."""
        rule = Rule("eft", self.avoid) if self.best_rule.kind == "lookahead" else self.best_rule
        priority = list(self.rank)
        top = max(self.rank, default=1.0) or 1.0
        current = self.best
        for i in range(passes):
            if i % 2 == 0:
                level = (0.05, 0.15, 0.3)[(i // 2) % 3]
                trial = [r * (1.0 + level * (2.0 * self.rng.random() - 1.0)) for r in self.rank]
            else:
                for t in critical_path(self.problem, current):
                    priority[t] += _NUDGE * top * self.rng.random()
                trial = rounded(priority)
            s = self.run_pass(rule, trial)
            self.offer(s)
            if i % 2 == 1:
                current = s

    def deadline_rules(self) -> list[Rule]:
        """Sub-deadlines, so that a cheap choice early does not make the deadline impossible
        later.  Two sources: the latest finish of the task in the first (makespan-minded)
        plan, scaled by deadline/its makespan; and the rest of the task's critical path by
        mean run times, stretched by 1, deadline/critical path and 1/2."""
        deadline = self.goal.deadline
        if deadline is None:
            return []
        due: list[tuple[float, ...]] = []
        reference = self.best
        if reference.makespan > 0:
            scale = deadline / reference.makespan
            due.append(tuple(f * scale for f in latest_finish(self.problem, reference)))
        critical = max(self.rank, default=0.0)
        tail = [r - w for r, w in zip(self.rank, self.weight, strict=True)]
        stretches = [1.0]
        if critical > 0 and deadline > critical:
            stretches.append(deadline / critical)
        stretches.append(0.5)
        due += [tuple(deadline - x * s for x in tail) for s in stretches]
        return [Rule("subdeadline", self.avoid, subdeadline=d) for d in due]

    def budget_rules(self, budget: float | None = None) -> list[Rule]:
        """Budget shares: the spare budget (over the cheapest options of the tasks left) goes to
        the current task whole, in proportion to its weight, or twice that."""
        budget = self.goal.budget if budget is None else budget
        assert budget is not None
        weight = tuple(self.weight)
        return [
            Rule("budget", self.avoid, budget=budget),
            Rule("budget", self.avoid, budget=budget, weight=weight),
            Rule("budget", self.avoid, budget=budget, weight=weight, spend=2.0),
        ]

    def spending_rules(self) -> list[Rule]:
        """For a cost objective with a deadline: plans that spend a quarter or a half of what the
        first plan spends beyond the cheapest, whichever of them meets the deadline."""
        if self.goal.deadline is None:
            return []
        cheapest = sum(min(ch.cost for ch in chs) for chs in self.problem.choices)
        extra = max(0.0, self.best.cost - cheapest)
        return [rule for f in (0.25, 0.5) for rule in self.budget_rules(cheapest + f * extra)[1:2]]

    # --- local search -------------------------------------------------------------------

    def local_search(self) -> None:
        current, current_key = self.best, self.goal.search_key(self.best)
        order = current.start_order(self.tiebreak)
        stale = 0
        while self.left > 0 and stale < _STALE_KICKS:
            moved = self.descend(current, current_key, order)
            if moved is not None:
                current, current_key = moved
                order = current.start_order(self.tiebreak)
                if self.offer(current):
                    stale = 0
                continue
            stale += 1
            current = self.kick(self.best)
            current_key = self.goal.search_key(current)
            order = current.start_order(self.tiebreak)
            self.offer(current)

    def descend(
        self, s: Schedule, key: tuple[float, ...], order: list[int]
    ) -> tuple[Schedule, tuple[float, ...]] | None:
        """The first move that improves ``s``, tried in a promising order; None at a local optimum."""
        pool = self.pool(s)
        for t in self.move_order(s, key):
            for ch, m in self.neighbours(t, s, pool):
                if self.left <= 0:
                    return None
                self.left -= 1
                new = self.rebuild(s, order, t, ch, m)
                new_key = self.goal.search_key(new)
                if new_key < key:
                    return new, new_key
        return None

    def rebuild(self, s: Schedule, order: list[int], t: int, ch: Choice, m: int) -> Schedule:
        choice, machine = list(s.choice), list(s.machine)
        choice[t], machine[t] = ch, m
        return build_fixed(self.problem, order, choice, machine)

    def move_order(self, s: Schedule, key: tuple[float, ...]) -> list[int]:
        """Critical tasks first when time is what matters, dearest tasks first when cost is."""
        rest = list(range(self.problem.n))
        self.rng.shuffle(rest)
        cost_first = (self.goal.objective == "cost" and key[0] == 0.0) or (
            self.goal.objective == "makespan" and key[0] > 0.0
        )
        if cost_first:
            rest.sort(key=lambda t: -s.choice[t].cost)
            return rest
        critical = critical_path(self.problem, s)
        seen = set(critical)
        return critical + [t for t in rest if t not in seen]

    def pool(self, s: Schedule) -> list[tuple[list[int], int | None]]:
        """Per class: the machines that ``s`` uses, and one it leaves untouched (or None)."""
        used = set(s.machine)
        out: list[tuple[list[int], int | None]] = []
        for first, count in zip(self.problem.first, self.problem.count, strict=True):
            machines = range(first, first + count)
            out.append(([m for m in machines if m in used], next((m for m in machines if m not in used), None)))
        return out

    def neighbours(self, t: int, s: Schedule, pool: list[tuple[list[int], int | None]]) -> list[tuple[Choice, int]]:
        """Other (option, machine) pairs for ``t``: each used machine of the option's class and
        one untouched one (they are all alike); on big classes only the machines of its
        parents and children and a few others."""
        problem = self.problem
        related = {s.machine[p] for p, _ in problem.parents[t]} | {s.machine[c] for c, _ in problem.children[t]}
        has_plain = any(problem.classes[ch.cls].gpus == 0 for ch in problem.choices[t])
        out: list[tuple[Choice, int]] = []
        for ch in problem.choices[t]:
            if self.avoid and ch.cpu_on_gpu and has_plain:
                continue
            if ch.gang:  # a gang's machines are chosen anew when the schedule is rebuilt
                if ch is not s.choice[t]:
                    out.append((ch, problem.first[ch.cls]))
                continue
            machines, idle = pool[ch.cls]
            if len(machines) > 8:
                near = [m for m in machines if m in related]
                others = [m for m in machines if m not in related]
                machines = near + self.rng.sample(others, min(4, len(others)))
            if idle is not None:
                machines = [*machines, idle]
            out += [(ch, m) for m in machines if not (m == s.machine[t] and ch is s.choice[t])]
        self.rng.shuffle(out)
        if self.goal.objective == "cost" or self.goal.budget is not None:
            out.sort(key=lambda cm: cm[0].cost)
        return out

    def kick(self, s: Schedule) -> Schedule:
        """Move two or three random tasks to random neighbours, from ``s``."""
        choice, machine = list(s.choice), list(s.machine)
        pool = self.pool(s)
        for t in self.rng.sample(range(self.problem.n), min(self.problem.n, self.rng.randint(2, 3))):
            options = self.neighbours(t, s, pool)
            if options:
                choice[t], machine[t] = self.rng.choice(options)
        self.left -= 1
        return build_fixed(self.problem, s.start_order(self.tiebreak), choice, machine)
