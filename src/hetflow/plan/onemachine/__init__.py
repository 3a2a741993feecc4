"""Planning a run on this one machine: the planner for the local runner
(local), variant choice when a qualifying GPU is free (choose), which GPUs a step gets
(gpupick), and ``--variant`` from the command line (steer).
"""
