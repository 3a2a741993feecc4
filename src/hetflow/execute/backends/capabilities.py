"""What an engine does itself, as a record every backend declares (``Capabilities``).

Kept apart from the backend contract (``base``), which reads the job and engine models, so
that a backend's plugin (``plugin.BackendPlugin``) can declare its capabilities without
loading them: the command line lists the registered backends on every call.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    name: str
    # The engine orders steps itself (Slurm --dependency=afterok): hetflow submits a step as
    # soon as its parents are submitted, naming them in Job.depends_on.
    holds_dependencies: bool = False
    # The engine assigns GPUs (Slurm gres, Ray num_gpus) and the container is given the
    # ones assigned; otherwise hetflow leases GPUs and passes their device nodes itself.
    assigns_gpus: bool = False
    # Steps may land on other machines: the work directory must be shared.
    multi_node: bool = False
    # The engine queues a submitted job until it can place it (Slurm, Ray): the step shows
    # "queued" from its submission until the engine says the job runs (EngineView.note_wait).
    queues: bool = False
    # The engine's nodes run the steps, where the run's stored plan put them: hetflow plans on
    # a cluster's node types and follows the plan's placements (``ClusterDispatch``), limits a
    # retry's growth by the node class, and starts a gang's replicas as templates the engine
    # places.  Otherwise every step runs on this machine, placed by its free capacity and GPU
    # leases (``LocalDispatch``).
    places_steps: bool = False

    @property
    def leases_gpus_here(self) -> bool:
        """hetflow picks the step's GPUs on this machine (a lease each) and gives the
        container their device nodes and the CPUs near them; their use is sampled here (NVML)."""
        return not self.assigns_gpus
