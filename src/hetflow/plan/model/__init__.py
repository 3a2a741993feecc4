"""One capacity model: the one predicate every planner, checker, simulation and admission asks.

``fit`` is the predicate, ``fits(node, demand) -> reasons`` over a ``NodeState`` and a
``Demand`` (cores, memory, whole GPUs, shares, MIG instances, named scalars), asked by the
planner's timeline, ``check_plan``, the simulations, the local leases and the Kubernetes
admission; ``machine`` is a machine now (the baselines' and the plan replay's), which admits
through it.  A new resource kind is a field of ``Demand`` and ``NodeState`` and a line of
``fits`` (or a named scalar, with no code at all).
"""
