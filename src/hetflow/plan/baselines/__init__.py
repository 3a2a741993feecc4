"""What the planner is measured against: event-driven simulations of real schedulers that
see the DAG only as it is released (a step becomes ready when its last parent finishes).
``eventsim`` holds what they share: the machines (``model.Machine``, admitting through
``model.fits``), the release of ready steps, the transfer waits and ``EventLoop``, the one
loop all three run (and the replay of a plan, ``plan.checking.simulator``).
``firstfit`` places each ready step on the first machine in cluster order that fits it;
``kubesched`` scores nodes as kube-scheduler's defaults do (LeastAllocated +
BalancedAllocation); ``backfill`` orders jobs by age and backfills as Slurm's EASY backfill.
A new baseline is a ``schedule`` function over ``EventLoop`` (see ``firstfit``).
"""
