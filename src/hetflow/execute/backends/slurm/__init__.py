"""The Slurm backend: one batch job per step attempt; Slurm orders them (afterok) and
assigns GPUs (gres).  Shaped like every backend package:

    settings.py   SlurmSettings, read from the config file's ``slurm:`` section
    translate.py  Job -> sbatch options and the batch script (pure functions)
    backend.py    SlurmBackend: check, submit, poll (squeue + exit files), cancel, release

Imported lazily by the backend factory: nothing here runs until a run asks for Slurm.
"""

from hetflow.execute.backends.slurm.backend import SlurmBackend
from hetflow.execute.backends.slurm.settings import SlurmSettings
from hetflow.execute.backends.slurm.translate import DEFAULT_GRES_TYPES, gres_type, job_script, sbatch_args

__all__ = ["DEFAULT_GRES_TYPES", "SlurmBackend", "SlurmSettings", "gres_type", "job_script", "sbatch_args"]
