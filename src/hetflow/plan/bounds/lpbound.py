"""A linear-programming lower bound on the makespan: the "resource pool" relaxation with the
DAG's chains in the same model, so the bound sees that a step moved off a crowded pool
(a GPU step run on its CPU variant) lengthens its chain.

The LP (any real plan is a feasible point of it, so its optimum is a lower bound):

* ``x[t, o] >= 0``, ``sum_o x[t, o] = 1``: task ``t`` split fractionally over its options
  (variant x class) that fit a machine of their class (the others cannot be planned);
* ``d[t] = sum_o x[t, o] * runtime(o)``: its (fractional) run time;
* ``C[t] >= d[t]`` and ``C[t] >= C[p] + d[t]`` for every parent ``p``: a finish after its
  chain of predecessors (communication counted free, as the critical-path bound does);
* ``T >= C[t]``;
* per class ``c`` and resource ``r`` (cores, memory, GPUs; in the one-task-per-machine model
  a whole machine and the GPUs): ``sum x[t, o] * runtime(o) * demand_r(o) * replicas(t) <=
  T * count(c) * capacity_r(c)``: a class's machines hold no more resource-seconds than
  they have over ``[0, T]``.

Minimise ``T``.  A plan, read as ``x`` = the option it took (0/1), ``C`` = its finish
times, ``T`` = its makespan, meets every row: a gang's run time is at least its option's
(``plan.feasible.gangs`` only adds the exchange), and no machine holds more than it has at any
instant.  So no plan beats the LP's optimum, and it is at least the critical path (with
fastest options) and the class-by-class work bound.

GLOP (OR-tools, the ``exact`` extra) solves it; without OR-tools ``lp_bound`` is None and
``bounds.lower_bound`` keeps its closed-form terms.  The returned value is rounded down
by a relative 1e-9 so the solver's tolerances cannot lift it above a real optimum.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from hetflow.plan.instance import Instance, Option

_SLACK = 1e-7  # the LP's feasibility tolerance is ~1e-7 relative: keep the bound beneath it


@dataclass(frozen=True)
class LpSolution:
    """The LP's optimum ``makespan`` and, per task, its fractions over its options (by the
    option's index in ``task.options``; options that fit no machine are absent)."""

    makespan: float
    fractions: tuple[dict[int, float], ...]


def _linear_solver() -> Any | None:
    try:
        return importlib.import_module("ortools.linear_solver.pywraplp")
    except ImportError:
        return None


def _fits(o: Option, instance: Instance, one_task: bool) -> bool:
    cls = next((c for c in instance.classes if c.name == o.machine_class), None)
    if cls is None or cls.count <= 0 or o.gpus > cls.gpus:
        return False
    return one_task or (o.cores <= cls.cores and o.memory <= cls.memory)


def lp_solution(instance: Instance, allowed: list[list[bool]] | None = None) -> LpSolution | None:
    """The LP's optimum and fractions, or None when OR-tools is missing or GLOP fails.
    ``allowed[t][k]``: whether option ``k`` of task ``t`` may be used (default: all); a task
    left with none makes the LP infeasible, reported as an infinite makespan."""
    pywraplp = _linear_solver()
    if pywraplp is None or not instance.tasks:
        return None
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return None
    one = instance.one_task_per_machine
    inf = solver.infinity()
    makespan = solver.NumVar(0.0, inf, "T")
    # per (class, resource): T * count - sum(x * seconds * demand / per-machine capacity) >= 0,
    # demands as fractions of a machine so that bytes and cores are on one scale for GLOP
    rows: dict[tuple[str, int], tuple[Any, float]] = {}
    for c in instance.classes:
        caps = (1.0, 0.0, float(c.gpus)) if one else (float(c.cores), float(c.memory), float(c.gpus))
        for r, cap in enumerate(caps):
            if cap > 0 and c.count > 0:
                row = solver.Constraint(0.0, inf)
                row.SetCoefficient(makespan, float(c.count))
                rows[(c.name, r)] = (row, cap)
    index = {t.name: i for i, t in enumerate(instance.tasks)}
    finish = [solver.NumVar(0.0, inf, f"C{i}") for i in range(len(instance.tasks))]
    duration = [solver.NumVar(0.0, inf, f"d{i}") for i in range(len(instance.tasks))]
    xs: list[dict[int, Any]] = []
    for i, t in enumerate(instance.tasks):
        one_of = solver.Constraint(1.0, 1.0)
        dur = solver.Constraint(0.0, 0.0)  # d - sum x * runtime = 0
        dur.SetCoefficient(duration[i], 1.0)
        mine: dict[int, Any] = {}
        for k, o in enumerate(t.options):
            if not _fits(o, instance, one) or (allowed is not None and not allowed[i][k]):
                continue
            x = solver.NumVar(0.0, 1.0, f"x{i}_{k}")
            mine[k] = x
            one_of.SetCoefficient(x, 1.0)
            dur.SetCoefficient(x, -o.runtime)
            seconds = o.runtime * max(1, t.replicas)
            demands = (1.0, 0.0, float(o.gpus)) if one else (o.cores, float(o.memory), float(o.gpus))
            for r, demand in enumerate(demands):
                if demand <= 0:
                    continue
                found = rows.get((o.machine_class, r))
                if found is None:  # a demand on a class with none of it: cannot fit (filtered above)
                    return None
                row, cap = found
                row.SetCoefficient(x, -seconds * demand / cap)
        if not mine:
            return LpSolution(float("inf"), ()) if allowed is not None else None
        xs.append(mine)
        start = solver.Constraint(0.0, inf)  # C - d >= 0
        start.SetCoefficient(finish[i], 1.0)
        start.SetCoefficient(duration[i], -1.0)
        end = solver.Constraint(0.0, inf)  # T - C >= 0
        end.SetCoefficient(makespan, 1.0)
        end.SetCoefficient(finish[i], -1.0)
    for e in instance.edges:
        p, q = index[e.parent], index[e.child]
        row = solver.Constraint(0.0, inf)  # C[c] - C[p] - d[c] >= 0
        row.SetCoefficient(finish[q], 1.0)
        row.SetCoefficient(finish[p], -1.0)
        row.SetCoefficient(duration[q], -1.0)
    objective = solver.Objective()
    objective.SetCoefficient(makespan, 1.0)
    objective.SetMinimization()
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE and allowed is not None:
        return LpSolution(float("inf"), ())
    if status != pywraplp.Solver.OPTIMAL:
        return None
    value = makespan.solution_value() * (1.0 - _SLACK)
    fractions = tuple({k: max(0.0, x.solution_value()) for k, x in mine.items()} for mine in xs)
    return LpSolution(max(0.0, value), fractions)


def lp_bound(instance: Instance) -> float | None:
    """The LP's optimum (see the module docstring), or None without OR-tools."""
    sol = lp_solution(instance)
    return None if sol is None else sol.makespan
