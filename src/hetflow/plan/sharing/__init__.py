"""Slices of GPUs: time-sliced and MPS shares and MIG instances.  ``gpuload`` keeps one GPU's
shared tenants over time for the planner's timeline (count, load, lowest planned load);
``sharecheck`` holds ``check_plan``'s rules for shares and MIG instances and the slowdown
model's inverse (``planned_load``: the load a tenant's run time was planned at);
``tenancy`` is the local runner's lease arithmetic (who holds which part of this machine's
GPUs); ``--explain``'s shared-against-whole answer is ``search.sharewhy`` (it replays the
search's timeline).  All three admit a tenant by the capacity model's rules
(``model.gpu_refusals``, ``model.sharing_refusal``); the slowdown model itself
(``solo x (1 + s x max(0, load - 1))``) is ``search.compiled.timeslice_runtime``, and
``profile.learn_slowdown`` fits ``s`` from measured runs.
"""
