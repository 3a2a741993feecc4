"""The queueing engines' overhead: Kubernetes (kubernetes, kube_hetflow), Ray (ray),
Slurm (slurm, slurmpack).
"""
