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
from hetflow.plan.heuristic import OBJECTIVES, plan_heuristic
from hetflow.plan.instance import Instance, Placement, Plan
from hetflow.plan.timeline import Choice, Compiled

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
    gangs = [t.name for t in instance.tasks if t.replicas > 1]
    if gangs:
        raise HetflowError(
            f"the exact planner does not place gang steps yet ({', '.join(gangs[:5])}); "
            "plan this workflow with the heuristic planner (leave out --exact)"
        )
    cp_model = _cp_model()
    cp = Compiled(instance)
    literals = sum(cp.count[ch.cls] for chs in cp.choices for ch in chs)
    if cp.n > MAX_TASKS or literals > MAX_LITERALS:
        raise HetflowError(
            f"the instance has {cp.n} tasks and {literals} (task, option, machine) choices; the exact planner "
            f"takes at most {MAX_TASKS} tasks and {MAX_LITERALS} choices: use the heuristic planner (plan_heuristic)"
        )
    hint = plan_heuristic(instance, objective=objective, deadline=deadline, budget=budget, gpu_policy="allow")
    if cp.n == 0:
        return replace(hint, algorithm="exact", optimal=True)
    model = _Model(cp_model, cp, objective, deadline, budget)
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
    """One (task, option, machine) triple of the model."""

    task: int
    choice: Choice
    machine: int
    present: Any  # a CP-SAT literal
    interval: Any  # a CP-SAT optional interval


class _Model:
    """The CP-SAT model of one instance (see the module docstring)."""

    def __init__(self, cp_model: Any, cp: Compiled, objective: str, deadline: float | None, budget: float | None):
        self.cp = cp
        self.model = cp_model.CpModel()
        self.notes: list[str] = []
        durations = [ch.runtime for chs in cp.choices for ch in chs]
        comms = [comm for ps in cp.parents for _, comm in ps]
        serial = sum(max(ch.runtime for ch in chs) for chs in cp.choices) + sum(comms)
        self.scale, self.exact = _time_scale(durations + comms, serial)
        if not self.exact:
            self.notes.append(f"times were rounded up to 1/{self.scale} s for CP-SAT, so optimality is not claimed")
        # Everything one after another, paying every transfer: a makespan some plan achieves.
        self.horizon = (
            sum(max(self.ticks(ch.runtime) for ch in chs) for chs in cp.choices) + sum(self.ticks(c) for c in comms) + 1
        )
        horizon = self.horizon
        m = self.model
        self.start = [m.NewIntVar(0, horizon, f"S{t}") for t in range(cp.n)]
        self.end = [m.NewIntVar(0, horizon, f"E{t}") for t in range(cp.n)]
        self.vars: list[list[_Var]] = []
        self.machine_vars: list[list[_Var]] = [[] for _ in range(cp.m)]
        for t in range(cp.n):
            self.vars.append(self._task(t))
        self._edges()
        self._machines()
        self.makespan = m.NewIntVar(0, horizon, "makespan")
        for t in range(cp.n):
            m.Add(self.makespan >= self.end[t])
        self._objective(objective, deadline, budget)

    def ticks(self, seconds: float) -> int:
        """Seconds as whole ticks, rounded up (exact when ``self.exact``)."""
        x = seconds * self.scale
        return round(x) if abs(x - round(x)) <= 1e-6 else math.ceil(x)

    def _task(self, t: int) -> list[_Var]:
        cp, m = self.cp, self.model
        out: list[_Var] = []
        for ch in cp.choices[t]:
            d = self.ticks(ch.runtime)
            for mach in range(cp.first[ch.cls], cp.first[ch.cls] + cp.count[ch.cls]):
                lit = m.NewBoolVar(f"x{t}_{ch.index}_{mach}")
                iv = m.NewOptionalFixedSizeIntervalVar(self.start[t], d, lit, f"i{t}_{ch.index}_{mach}")
                v = _Var(t, ch, mach, lit, iv)
                out.append(v)
                self.machine_vars[mach].append(v)
        m.AddExactlyOne([v.present for v in out])
        m.Add(self.end[t] == self.start[t] + sum(self.ticks(v.choice.runtime) * v.present for v in out))
        return out

    def _edges(self) -> None:
        m = self.model
        mach = [sum(v.machine * v.present for v in vs) for vs in self.vars]
        for c, parents in enumerate(self.cp.parents):
            for p, comm in parents:
                m.Add(self.start[c] >= self.end[p])
                delay = self.ticks(comm)
                if delay == 0:
                    continue
                same = m.NewBoolVar(f"same{p}_{c}")
                m.Add(mach[p] == mach[c]).OnlyEnforceIf(same)
                m.Add(self.start[c] >= self.end[p] + delay).OnlyEnforceIf(same.Not())

    def _machines(self) -> None:
        cp, m = self.cp, self.model
        for mach, vs in enumerate(self.machine_vars):
            if len(vs) < 2:
                continue
            intervals = [v.interval for v in vs]
            if cp.one_task:
                m.AddNoOverlap(intervals)
                continue
            cls = cp.classes[cp.machine_class[mach]]
            core_unit = 1 if all(float(v.choice.cores).is_integer() for v in vs) else 1000
            self._cumulative(intervals, [math.ceil(v.choice.cores * core_unit) for v in vs], cls.cores * core_unit)
            unit = reduce(math.gcd, [v.choice.memory for v in vs], cls.memory) or 1
            self._cumulative(intervals, [v.choice.memory // unit for v in vs], cls.memory // unit)
            self._cumulative(intervals, [v.choice.gpus for v in vs], cls.gpus)

    def _cumulative(self, intervals: list[Any], demands: list[int], capacity: int) -> None:
        if sum(demands) > capacity:
            self.model.AddCumulative(intervals, demands, capacity)

    def _objective(self, objective: str, deadline: float | None, budget: float | None) -> None:
        m = self.model
        biggest = max((ch.cost for chs in self.cp.choices for ch in chs), default=0.0)
        unit = biggest / 1_000_000 if biggest > 0 else 1.0
        cost = sum(round(v.choice.cost / unit) * v.present for vs in self.vars for v in vs)
        if budget is not None:
            m.Add(cost <= math.floor(budget / unit + 1e-6))
        if deadline is not None and objective == "cost":
            m.Add(self.makespan <= math.floor(deadline * self.scale + 1e-6))
        if objective == "cost" or budget is not None:
            whole = all(abs(ch.cost / unit - round(ch.cost / unit)) <= 1e-6 for chs in self.cp.choices for ch in chs)
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
        cp, m = self.cp, self.model
        if bound and self.exact:
            m.Add(self.makespan <= self.ticks(plan.makespan))
        for t, name in enumerate(cp.names):
            p = plan.placements[name]
            m.AddHint(self.start[t], min(self.horizon, self.ticks(p.start)))
            for v in self.vars[t]:
                chosen = cp.machine_name[v.machine] == p.machine and v.choice.index == _option_index(cp, t, p)
                m.AddHint(v.present, chosen)

    def plan(self, solver: Any, objective: str) -> Plan:
        cp = self.cp
        placements: dict[str, Placement] = {}
        chosen: list[tuple[float, int, _Var]] = []
        for t, vs in enumerate(self.vars):
            v = next(v for v in vs if solver.BooleanValue(v.present))
            chosen.append((solver.Value(self.start[t]) / self.scale, t, v))
        gpus = _gpu_indices(cp, chosen)
        for start, t, v in chosen:
            option = cp.instance.tasks[t].options[v.choice.index]
            placements[cp.names[t]] = Placement(
                task=cp.names[t],
                variant=option.variant,
                machine=cp.machine_name[v.machine],
                machine_class=option.machine_class,
                start=start,
                finish=start + option.runtime,
                cores=option.cores,
                memory=option.memory,
                gpus=gpus[t],
            )
        makespan = max(p.finish for p in placements.values())
        return Plan(placements, makespan, plan_cost(cp.instance, placements), "exact", objective)


def _option_index(cp: Compiled, t: int, p: Placement) -> int:
    for k, o in enumerate(cp.instance.tasks[t].options):
        if o.variant == p.variant and o.machine_class == p.machine_class:
            return k
    return -1


def _gpu_indices(cp: Compiled, chosen: list[tuple[float, int, _Var]]) -> dict[int, tuple[int, ...]]:
    """By start time on each machine, the lowest GPU indices free at the start (interval-graph
    colouring: a GPU given at a start stays busy to the finish, so later starts avoid it)."""
    free_at: dict[int, list[float]] = {}
    out: dict[int, tuple[int, ...]] = {}
    for start, t, v in sorted(chosen, key=lambda x: (x[0], x[1])):
        g = v.choice.gpus
        if g == 0:
            out[t] = ()
            continue
        busy = free_at.setdefault(v.machine, [0.0] * cp.classes[cp.machine_class[v.machine]].gpus)
        if v.choice.runtime <= 0:
            out[t] = tuple(range(g))
            continue
        ids = [i for i, until in enumerate(busy) if until <= start + 1e-9 * max(1.0, start)][:g]
        if len(ids) < g:  # cannot happen for a solution of the model; fail loudly if it does
            raise HetflowError(f"internal error: no free GPU for task {cp.names[t]!r} on {cp.machine_name[v.machine]}")
        for i in ids:
            busy[i] = start + v.choice.runtime
        out[t] = tuple(ids)
    return out
