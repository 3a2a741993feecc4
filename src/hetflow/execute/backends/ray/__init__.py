"""The Ray backend: each step attempt is a Ray task that runs the step's container with
podman in the foreground on the node Ray chose; one detached actor per run owns the run's
tasks, so they outlive the driver (adoption).  Shaped like every backend package:

    settings.py   RaySettings, read from the config file's ``ray:`` section
    translate.py  Job -> Ray task options, a node's hetflow name, the GPUs Ray assigned
                  (pure functions, no Ray import)
    gangs.py      gang Job -> placement group bundles and strategy, each replica's contract
                  (pure functions, no Ray import)
    container.py  inside the task: the container in the foreground, stopped on cancel
    restore.py    CRIU checkpoints: the dump task pinned to a step's node, a restore in its task
    gangrun.py    inside the keeper: one gang's placement group and replica tasks
    keeper.py     RunKeeper, the run's detached actor
    backend.py    RayBackend: check, submit, poll, cancel, release, checkpoint

Names load on first use (``hetflow.lazy``): importing the package, or its ``plugin`` (which
the registry reads on every command line), does not import Ray; ``backend`` does.  The package is
named ``ray`` and still ``import ray`` inside it means the Ray library: imports are
absolute (PEP 328), and no module here is run as a script, so the folder holding this
package is never on ``sys.path`` of a driver or a worker, where it would hide the library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.ray.backend import RayBackend
    from hetflow.execute.backends.ray.container import foreground_argv, ray_nodes, run_container
    from hetflow.execute.backends.ray.gangs import GangRequest, bundle, gang_request, replica_specs, strategy
    from hetflow.execute.backends.ray.keeper import RunKeeper
    from hetflow.execute.backends.ray.settings import NAMESPACE, RaySettings
    from hetflow.execute.backends.ray.translate import (
        MIG_RESOURCE,
        NODE_LABEL,
        NODE_RESOURCE,
        NODE_TYPE_RESOURCE,
        VENDOR_RESOURCE,
        RayNode,
        TaskRequest,
        accelerator_type,
        gpu_resources,
        node_name,
        task_request,
        with_gpus,
        with_vendor,
    )

_WHERE = {
    "backend": ["RayBackend"],
    "container": ["foreground_argv", "ray_nodes", "run_container"],
    "gangs": ["GangRequest", "bundle", "gang_request", "replica_specs", "strategy"],
    "keeper": ["RunKeeper"],
    "settings": ["NAMESPACE", "RaySettings"],
    "translate": [
        "MIG_RESOURCE",
        "NODE_LABEL",
        "NODE_RESOURCE",
        "NODE_TYPE_RESOURCE",
        "RayNode",
        "TaskRequest",
        "VENDOR_RESOURCE",
        "accelerator_type",
        "gpu_resources",
        "node_name",
        "task_request",
        "with_gpus",
        "with_vendor",
    ],
}

__all__ = [
    "MIG_RESOURCE",
    "NAMESPACE",
    "NODE_LABEL",
    "NODE_RESOURCE",
    "NODE_TYPE_RESOURCE",
    "VENDOR_RESOURCE",
    "GangRequest",
    "RayBackend",
    "RayNode",
    "RaySettings",
    "RunKeeper",
    "TaskRequest",
    "accelerator_type",
    "bundle",
    "foreground_argv",
    "gang_request",
    "gpu_resources",
    "node_name",
    "ray_nodes",
    "replica_specs",
    "run_container",
    "strategy",
    "task_request",
    "with_gpus",
    "with_vendor",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
