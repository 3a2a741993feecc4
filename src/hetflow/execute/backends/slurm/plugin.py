"""The Slurm backend as the registry lists it (``backends.plugin``): the ``slurm:`` section
of the settings file is ``settings.SlurmSettings``."""

from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.plugin import BackendPlugin

PLUGIN = BackendPlugin(
    name="slurm",
    help="one batch job per step attempt (plans on --cluster FILE)",
    capabilities=Capabilities(
        name="slurm", holds_dependencies=True, assigns_gpus=True, multi_node=True, queues=True, places_steps=True
    ),
    backend="hetflow.execute.backends.slurm.backend:SlurmBackend",
    settings="hetflow.execute.backends.slurm.settings:SlurmSettings",
    env={"HETFLOW_SLURM_PARTITION": "partition", "HETFLOW_SLURM_ACCOUNT": "account"},
    cluster_file=True,
)
