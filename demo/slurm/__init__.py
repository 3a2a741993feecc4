"""A local Slurm test cluster on this one machine (cluster) and its fake nodes
(nodes).
"""
