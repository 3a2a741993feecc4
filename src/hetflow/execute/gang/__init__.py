"""The gang path: one step run as N replicas started together, all or none.

``replicas`` names a gang attempt's containers (``hf-RUN-STEP-ATTEMPT-rN``), holds the
launch contract (``LAUNCH_CONTRACT``: the environment each rank sees, rendered alike by this
machine, Slurm, Ray and the Kubernetes export) and folds the replicas' states into the
attempt's; ``mpilaunch`` writes what an ``mpirun``-over-ssh gang needs (keys, sshd and ssh
configs, hostfiles) and ``mpicommands`` the replicas' commands and Open MPI's environment.
All pure: ``execute.launch.launcher`` builds the local replicas' containers from them, and each
backend in ``execute.backends`` starts a gang its own way (podman network, srun, Ray
placement group).
"""

from hetflow.execute.gang.replicas import layout, replica_env

# tools/gpu-check builds a torch gang's environment on a real GPU with these
__all__ = ["layout", "replica_env"]
