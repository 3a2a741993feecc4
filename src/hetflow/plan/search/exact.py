"""The exact planner: the planning problem as a CP-SAT model (OR-tools), for small DAGs.

The model, per task ``t``:

- a start ``S[t]`` and an end ``E[t]``, and one optional fixed-size interval per (option,
  machine of the option's class), with a presence literal; exactly one is present, and
  ``E[t] = S[t] + the chosen run time``;
- ``mach[t]``, the number of its machine, as a linear sum of the presence literals;
- per edge ``p -> c``: ``S[c] >= E[p]``, and a "same machine" literal: unless it holds (which
  forces ``mach[p] == mach[c]``), ``S[c] >= E[p] + bytes / bandwidth``;
- per machine: no overlap of its intervals in the one-task-per-machine model, else one
  cumulative constraint each for cores, memory and GPUs;
- the makespan ``>= E[t]``.

A gang task (``replicas > 1``, ``plan.feasible.gangs``) is placed whole, on machines of one class,
in one of two modes per option: on one machine (when ``per_node`` allows it), a literal
per machine whose interval holds ``replicas`` times the option's demands for the one-node
run time; or spread, one literal for the option and, per machine, a presence ``y`` and a
replica count ``k`` in ``[y, per_node * y]`` summing to ``replicas`` over at least two
machines, each interval holding ``k`` times the demands for the across-nodes run time (the
cumulative constraints take ``k`` as a variable demand).  Every replica needs a gang's
inputs and any of them may write its outputs, so an edge into or out of a gang always pays
its transfer, as the list planner assumes.

GPU indices are given after solving: by start time, the lowest indices that are free (the
cumulative constraint on the GPU count guarantees enough are).

CP-SAT works in integers: times are scaled by the smallest power of ten (up to 1000) that
makes every run time and transfer time whole.  When none does, they are rounded *up* at a
scale that keeps the horizon near 10^7, so the plan is still valid with the true times, and
``optimal`` is not claimed (a note says why).  Costs are whole micro-units of the largest
option's cost; a cost objective is proven optimal only up to that rounding.

The solver is hinted with the heuristic's plan, and the better of the two is returned.  With
``workers > 1`` CP-SAT runs a portfolio in parallel threads: a proven optimum is the same on
every run, but which of several optimal plans comes back, and what a time-limited search
finds, can vary.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, replace
from functools import reduce
from typing import Any

from hetflow.errors import HetflowError
from hetflow.plan.cost import plan_cost
from hetflow.plan.instance import Instance, Placement, Plan
from hetflow.plan.search.compiled import Choice, Compiled
from hetflow.plan.search.gpuindex import gpu_indices
from hetflow.plan.search.heuristic import OBJECTIVES, plan_heuristic

MAX_TASKS = 200
MAX_LITERALS = 40_000  # task x option x machine presence literals
_HORIZON_TARGET = 10_000_000


def plan_exact(
    instance: Instance,
    *,
    time_limit: float = 10.0,
    objective: str = "makespan",
    workers: int = 2,
    deadline: float | None = None,
    budget: float | None = None,
) -> Plan:
    """An optimal plan (``plan.optimal``) if CP-SAT proves one within ``time_limit`` seconds,
    else the best plan found (never worse than the heuristic's).

    ``objective`` and the limits mean what they mean for ``plan_heuristic``; a cost objective
    breaks ties by makespan.  Raises ``HetflowError`` when OR-tools is missing or the instance
    is too big for an exact search."""
    if objective not in OBJECTIVES:
        raise HetflowError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    cp_model = _cp_model()
    problem = Compiled(instance)
    literals = sum(problem.count[ch.cls] for chs in problem.choices for ch in chs)
    if problem.n > MAX_TASKS or literals > MAX_LITERALS:
        raise HetflowError(
            f"the instance has {problem.n} tasks and {literals} (task, option, machine) choices; the exact planner "
            f"takes at most {MAX_TASKS} tasks and {MAX_LITERALS} choices: use the heuristic planner (plan_heuristic)"
        )
    hint = plan_heuristic(instance, objective=objective, deadline=deadline, budget=budget, gpu_policy="allow")
    if problem.n == 0:
        return replace(hint, algorithm="exact", optimal=True)
    if any(ch.slot is not None for chs in problem.choices for ch in chs):
        # CP-SAT's cumulative GPU count cannot say which tenants share one GPU at what load,
        # which MIG instance is free, or which of a mixed machine's GPUs a vendor may take.
        return replace(
            hint,
            notes=(
                *hint.notes,
                "exact mode does not model GPU shares, MIG instances or mixed-vendor machines; "
                "this is the heuristic's plan (sharing-aware), not a proven optimum",
            ),
        )
    model = _Model(cp_model, problem, objective, deadline, budget)
    model.hint(hint, bound=objective == "makespan" and budget is None)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = max(1, int(workers))
    solver.parameters.random_seed = 0
    status = solver.Solve(model.model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        why = "found no plan in time"
        if status == cp_model.INFEASIBLE:
            why = "proved that no plan meets the limits" if model.exact else "found no plan within the limits"
            why += "" if model.exact else " (its times and costs are rounded)"
        return replace(hint, notes=(*hint.notes, f"CP-SAT {why}; this is the heuristic's plan"))
    plan = model.plan(solver, objective)
    notes = list(model.notes)
    optimal = status == cp_model.OPTIMAL and model.exact
    if status == cp_model.FEASIBLE:
        bound = ""
        if objective == "makespan":
            bound = f"; no plan takes less than {solver.BestObjectiveBound() / model.scale:g} s"
        notes.append(f"time limit of {time_limit:g} s reached before the optimum was proven{bound}")
    if _key(hint, objective, deadline, budget) < _key(plan, objective, deadline, budget):
        why = "with times rounded up, " if not model.exact else ""
        return replace(hint, notes=(*hint.notes, f"CP-SAT found nothing better {why}than the heuristic's plan"))
    return replace(plan, optimal=optimal, notes=tuple(notes) + _limit_notes(plan, deadline, budget))


def _cp_model() -> Any:
    try:
        return importlib.import_module("ortools.sat.python.cp_model")
    except ImportError as exc:
        raise HetflowError(
            "the exact planner needs OR-tools: pip install 'hetflow[exact]' (or use the heuristic planner)"
        ) from exc


def _key(plan: Plan, objective: str, deadline: float | None, budget: float | None) -> tuple[float, float, float]:
    ms, cost = float(f"{plan.makespan:.9g}"), float(f"{plan.cost:.9g}")
    if objective == "cost":
        return (0.0 if deadline is None else max(0.0, ms - deadline), cost, ms)
    return (0.0 if budget is None else max(0.0, cost - budget), ms, cost)


def _limit_notes(plan: Plan, deadline: float | None, budget: float | None) -> tuple[str, ...]:
    notes = []
    if deadline is not None and plan.makespan > deadline * (1 + 1e-9):
        notes.append(f"deadline not met: the plan takes {plan.makespan:g} s, over the deadline of {deadline:g} s")
    if budget is not None and plan.cost > budget * (1 + 1e-9):
        notes.append(f"budget not met: the plan costs ${plan.cost:.4f}, over the budget of ${budget:.4f}")
    return tuple(notes)


def _time_scale(values: list[float], horizon: float) -> tuple[int, bool]:
    """The smallest of 1, 10, 100, 1000 that makes every value whole; else one that keeps the
    horizon near ``_HORIZON_TARGET``, and False (values will be rounded up)."""
    for scale in (1, 10, 100, 1000):
        if all(abs(v * scale - round(v * scale)) <= 1e-6 for v in values):
            return scale, True
    scale = 10 ** max(0, math.floor(math.log10(_HORIZON_TARGET / max(horizon, 1e-9))))
    return scale, False


@dataclass(frozen=True)
class _Var:
    """One (task, option, machine) triple of the model; ``count`` replicas of the option's
    demands are held on the machine (1 for a plain task; an int or a CP-SAT variable for a
    gang), up to ``most``."""

    task: int
    choice: Choice
    machine: int
    present: Any  # a CP-SAT literal
    interval: Any  # a CP-SAT optional interval
    count: Any = 1
    most: int = 1


@dataclass(frozen=True)
class _Spread:
    """A gang's option in the spread mode: its literal and its machines' vars."""

    task: int
    choice: Choice
    present: Any
    machines: tuple[_Var, ...]


class _Model:
    """The CP-SAT model of one instance (see the module docstring)."""

    def __init__(self, cp_model: Any, problem: Compiled, objective: str, deadline: float | None, budget: float | None):
        self.problem = problem
        self.model = cp_model.CpModel()
        self.notes: list[str] = []
        durations = [_duration(ch, n) for chs in problem.choices for ch in chs for n in ((1, 2) if ch.gang else (1,))]
        comms = [comm for ps in problem.parents for _, comm in ps]
        serial = sum(max(_duration(ch, 2) for ch in chs) for chs in problem.choices) + sum(comms)
        self.scale, self.exact = _time_scale(durations + comms, serial)
        if not self.exact:
            self.notes.append(f"times were rounded up to 1/{self.scale} s for CP-SAT, so optimality is not claimed")
        # Everything one after another, paying every transfer: a makespan some plan achieves.
        self.horizon = (
            sum(max(self.ticks(_duration(ch, n)) for ch in chs for n in (1, 2)) for chs in problem.choices)
            + sum(self.ticks(c) for c in comms)
            + 1
        )
        horizon = self.horizon
        m = self.model
        self.start = [m.NewIntVar(0, horizon, f"S{t}") for t in range(problem.n)]
        self.end = [m.NewIntVar(0, horizon, f"E{t}") for t in range(problem.n)]
        self.vars: list[list[_Var]] = []
        self.spread: list[list[_Spread]] = [[] for _ in range(problem.n)]
        self.machine_vars: list[list[_Var]] = [[] for _ in range(problem.m)]
        for t in range(problem.n):
            self.vars.append(self._task(t))
        self._edges()
        self._machines()
        self.makespan = m.NewIntVar(0, horizon, "makespan")
        for t in range(problem.n):
            m.Add(self.makespan >= self.end[t])
        self._objective(objective, deadline, budget)

    def ticks(self, seconds: float) -> int:
        """Seconds as whole ticks, rounded up (exact when ``self.exact``)."""
        x = seconds * self.scale
        return round(x) if abs(x - round(x)) <= 1e-6 else math.ceil(x)

    def _task(self, t: int) -> list[_Var]:
        problem, m = self.problem, self.model
        out: list[_Var] = []
        spread: list[_Spread] = []
        for ch in problem.choices[t]:
            machines = range(problem.first[ch.cls], problem.first[ch.cls] + problem.count[ch.cls])
            if ch.gang:
                if ch.per_node >= ch.replicas:  # all on one machine: the one-node run time
                    d = self.ticks(ch.runtime + ch.comm1)
                    for mach in machines:
                        lit = m.NewBoolVar(f"x{t}_{ch.index}_{mach}")
                        iv = m.NewOptionalFixedSizeIntervalVar(self.start[t], d, lit, f"i{t}_{ch.index}_{mach}")
                        v = _Var(t, ch, mach, lit, iv, ch.replicas, ch.replicas)
                        out.append(v)
                        self.machine_vars[mach].append(v)
                if problem.count[ch.cls] >= 2 and ch.per_node * problem.count[ch.cls] >= ch.replicas:
                    spread.append(self._spread(t, ch, machines))
                continue
            d = self.ticks(ch.runtime)
            for mach in machines:
                lit = m.NewBoolVar(f"x{t}_{ch.index}_{mach}")
                iv = m.NewOptionalFixedSizeIntervalVar(self.start[t], d, lit, f"i{t}_{ch.index}_{mach}")
                v = _Var(t, ch, mach, lit, iv)
                out.append(v)
                self.machine_vars[mach].append(v)
        self.spread[t] = spread
        m.AddExactlyOne([v.present for v in out] + [sp.present for sp in spread])
        m.Add(
            self.end[t]
            == self.start[t]
            + sum(self.ticks(_duration(v.choice, 1)) * v.present for v in out)
            + sum(self.ticks(_duration(sp.choice, 2)) * sp.present for sp in spread)
        )
        return out

    def _spread(self, t: int, ch: Choice, machines: range) -> _Spread:
        """A gang's option over two or more machines of its class (see the module docstring)."""
        m = self.model
        z = m.NewBoolVar(f"z{t}_{ch.index}")
        d = self.ticks(ch.runtime + ch.comm_n)
        vs = []
        for mach in machines:
            y = m.NewBoolVar(f"y{t}_{ch.index}_{mach}")
            k = m.NewIntVar(0, ch.per_node, f"k{t}_{ch.index}_{mach}")
            m.Add(k >= y)
            m.Add(k <= ch.per_node * y)
            iv = m.NewOptionalFixedSizeIntervalVar(self.start[t], d, y, f"g{t}_{ch.index}_{mach}")
            v = _Var(t, ch, mach, y, iv, k, ch.per_node)
            vs.append(v)
            self.machine_vars[mach].append(v)
        m.Add(sum(v.count for v in vs) == ch.replicas * z)
        m.Add(sum(v.present for v in vs) >= 2 * z)
        for v in vs:
            m.AddImplication(v.present, z)
        return _Spread(t, ch, z, tuple(vs))

    def _edges(self) -> None:
        m = self.model
        gang = [any(ch.gang for ch in chs) for chs in self.problem.choices]
        mach = [sum(v.machine * v.present for v in vs) for vs in self.vars]
        for c, parents in enumerate(self.problem.parents):
            for p, comm in parents:
                m.Add(self.start[c] >= self.end[p])
                delay = self.ticks(comm)
                if delay == 0:
                    continue
                if gang[p] or gang[c]:  # a gang always pays the transfer (module docstring)
                    m.Add(self.start[c] >= self.end[p] + delay)
                    continue
                same = m.NewBoolVar(f"same{p}_{c}")
                m.Add(mach[p] == mach[c]).OnlyEnforceIf(same)
                m.Add(self.start[c] >= self.end[p] + delay).OnlyEnforceIf(same.Not())

    def _machines(self) -> None:
        problem, m = self.problem, self.model
        for mach, vs in enumerate(self.machine_vars):
            if len(vs) < 2 and all(v.most <= 1 for v in vs):
                continue
            intervals = [v.interval for v in vs]
            if problem.one_task:
                m.AddNoOverlap(intervals)
                continue
            cls = problem.classes[problem.machine_class[mach]]
            core_unit = 1 if all(float(v.choice.cores).is_integer() for v in vs) else 1000
            self._cumulative(vs, [math.ceil(v.choice.cores * core_unit) for v in vs], cls.cores * core_unit)
            unit = reduce(math.gcd, [v.choice.memory for v in vs], cls.memory) or 1
            self._cumulative(vs, [v.choice.memory // unit for v in vs], cls.memory // unit)
            self._cumulative(vs, [v.choice.gpus for v in vs], cls.gpus)

    def _cumulative(self, vs: list[_Var], each: list[int], capacity: int) -> None:
        """Capacity over the machine's intervals, each holding ``count`` times ``each``."""
        if sum(e * v.most for e, v in zip(each, vs, strict=True)) > capacity:
            demands = [v.count * e for e, v in zip(each, vs, strict=True)]
            self.model.AddCumulative([v.interval for v in vs], demands, capacity)

    def _objective(self, objective: str, deadline: float | None, budget: float | None) -> None:
        m = self.model
        biggest = max((ch.cost for chs in self.problem.choices for ch in chs), default=0.0)
        unit = biggest / 1_000_000 if biggest > 0 else 1.0
        cost = sum(round(_mode_cost(v.choice, 1) / unit) * v.present for vs in self.vars for v in vs) + sum(
            round(_mode_cost(sp.choice, 2) / unit) * sp.present for sps in self.spread for sp in sps
        )
        if budget is not None:
            m.Add(cost <= math.floor(budget / unit + 1e-6))
        if deadline is not None and objective == "cost":
            m.Add(self.makespan <= math.floor(deadline * self.scale + 1e-6))
        if objective == "cost" or budget is not None:
            whole = all(
                abs(ch.cost / unit - round(ch.cost / unit)) <= 1e-6 for chs in self.problem.choices for ch in chs
            )
            if not whole:
                self.exact = False
                self.notes.append("costs were rounded to millionths of the dearest option's for CP-SAT")
        if objective == "cost":
            m.Minimize(cost * (self.horizon + 1) + self.makespan)
        else:
            m.Minimize(self.makespan)

    def hint(self, plan: Plan, bound: bool) -> None:
        """Start the search from ``plan``; with ``bound``, also look only for plans no longer
        than it (valid when times are exact and no budget can make ``plan`` infeasible)."""
        problem, m = self.problem, self.model
        if bound and self.exact:
            m.Add(self.makespan <= self.ticks(plan.makespan))
        for t, name in enumerate(problem.names):
            p = plan.placements[name]
            m.AddHint(self.start[t], min(self.horizon, self.ticks(p.start)))
            option = _option_index(problem, t, p)
            held = {mm: k for mm, (k, _g) in p.per_machine().items()}
            one = len(held) == 1
            for v in self.vars[t]:
                chosen = problem.machine_name[v.machine] == p.machine and v.choice.index == option and one
                m.AddHint(v.present, chosen)
            for sp in self.spread[t]:
                chosen = sp.choice.index == option and not one
                m.AddHint(sp.present, chosen)
                for v in sp.machines:
                    k = held.get(problem.machine_name[v.machine], 0) if chosen else 0
                    m.AddHint(v.present, k > 0)
                    m.AddHint(v.count, k)

    def plan(self, solver: Any, objective: str) -> Plan:
        problem = self.problem
        placements: dict[str, Placement] = {}
        # what each task holds: its option, its run time, and (machine, replicas) in rank order
        chosen: list[tuple[float, int, Choice, float, list[tuple[int, int]]]] = []
        for t, vs in enumerate(self.vars):
            start = solver.Value(self.start[t]) / self.scale
            v = next((v for v in vs if solver.BooleanValue(v.present)), None)
            if v is not None:
                chosen.append((start, t, v.choice, _duration(v.choice, 1), [(v.machine, v.most)]))
                continue
            sp = next(sp for sp in self.spread[t] if solver.BooleanValue(sp.present))
            held = [(w.machine, solver.Value(w.count)) for w in sp.machines if solver.BooleanValue(w.present)]
            chosen.append((start, t, sp.choice, _duration(sp.choice, 2), held))
        gpus = gpu_indices(problem, chosen)
        for start, t, ch, runtime, held in chosen:
            option = problem.instance.tasks[t].options[ch.index]
            ranks: tuple[tuple[str, tuple[int, ...]], ...] = ()
            if ch.gang:
                ranks = tuple(
                    (problem.machine_name[mach], gpus[(t, mach)][i * ch.gpus : (i + 1) * ch.gpus])
                    for mach, k in held
                    for i in range(k)
                )
            mach0 = held[0][0]
            placements[problem.names[t]] = Placement(
                task=problem.names[t],
                variant=option.variant,
                machine=problem.machine_name[mach0],
                machine_class=option.machine_class,
                start=start,
                finish=start + runtime,
                cores=option.cores,
                memory=option.memory,
                gpus=ranks[0][1] if ranks else gpus[(t, mach0)],
                ranks=ranks,
            )
        makespan = max(p.finish for p in placements.values())
        return Plan(placements, makespan, plan_cost(problem.instance, placements), "exact", objective)


def _duration(ch: Choice, nodes: int) -> float:
    """A choice's run time on ``nodes`` machines (a gang pays its allreduce)."""
    if not ch.gang:
        return ch.runtime
    return ch.runtime + (ch.comm1 if nodes == 1 else ch.comm_n)


def _mode_cost(ch: Choice, nodes: int) -> float:
    """A choice's dollars on ``nodes`` machines: ``Choice.cost`` is priced at the gang's
    cheapest mode, so scale it by the mode's run time."""
    if not ch.gang:
        return ch.cost
    cheapest = _duration(ch, 1 if ch.per_node >= ch.replicas else 2)
    return ch.cost * _duration(ch, nodes) / cheapest if cheapest > 0 else ch.cost


def _option_index(problem: Compiled, t: int, p: Placement) -> int:
    for k, o in enumerate(problem.instance.tasks[t].options):
        if o.variant == p.variant and o.machine_class == p.machine_class:
            return k
    return -1
