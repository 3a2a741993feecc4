"""The shell a Slurm job script is made of: keeping the
container in the job's cgroup (cgroup), the GPUs Slurm assigned (devices), what the
container used (usage), and moving outputs into place before it ends 0 (publish).
"""
