"""Lower bounds on the makespan, the denominator of every planner figure.  ``lower`` has the
closed-form bound (critical path, core and GPU work over capacity) and the strong one
(``lower_bound(strong=True)``: option pruning by a guessed makespan, area with heads and
tails, GPU steps in whole rounds, and the LP of ``lpbound``: chains and per-class capacities,
solved with GLOP when OR-Tools is installed).
"""
