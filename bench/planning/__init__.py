"""Planner benchmarks: the planner on the shared workloads (planner, planner_saga),
at scale (planscale), GPU sharing (sharing), virtual clusters (virtual), and gangs (gang,
gang_online).
"""
