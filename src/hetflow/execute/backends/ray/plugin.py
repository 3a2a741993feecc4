"""The Ray backend as the registry lists it (``backends.plugin``): the ``ray:`` section of
the settings file is ``settings.RaySettings``.  Importing this module does not import Ray."""

from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.plugin import BackendPlugin

PLUGIN = BackendPlugin(
    name="ray",
    help="one Ray task per step attempt, its container run with podman on the node (plans on --cluster FILE)",
    capabilities=Capabilities(
        name="ray", holds_dependencies=False, assigns_gpus=True, multi_node=True, queues=True, places_steps=True
    ),
    backend="hetflow.execute.backends.ray.backend:RayBackend",
    settings="hetflow.execute.backends.ray.settings:RaySettings",
    env={"HETFLOW_RAY_ADDRESS": "address"},
    cluster_file=True,
)
