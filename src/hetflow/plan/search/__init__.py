"""The planner's search: how hetflow turns an ``Instance`` into a ``Plan``.  ``compiled``
indexes the instance into arrays (every task's choices: variant, class, GPU slot, run time,
cost) once; ``timeline`` keeps one machine's cores, memory, GPUs, shared tenants and MIG
instances over time and answers the earliest start of a demand (jumping over its runs of
segments too full for that demand); ``listpass`` is one list-scheduling pass over a priority
order (a busy class is searched in one ``sweep`` over its machines), each task placed by a ``score`` plugin
(earliest finish, look-ahead, PEFT, sub-deadline, budget, cheapest); ``heuristic`` runs
many passes (priorities from ``ranks``: HEFT's upward and downward ranks, PEFT's table)
and improves the best by local search along the critical path; ``exact`` solves small
instances with CP-SAT (``gpuindex`` gives its solution's steps their GPU indices);
``sharewhy`` answers ``--explain`` for a shared GPU against a whole one by placing the step
again on a copy of its timeline.
Nothing here reads files or the clock.
"""
