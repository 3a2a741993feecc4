"""The local backend as the registry lists it (``backends.plugin``)."""

from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.plugin import BackendPlugin

PLUGIN = BackendPlugin(
    name="local",
    help="podman (or docker) containers on this machine, hetflow leasing its GPUs",
    capabilities=Capabilities(name="local"),
    backend="hetflow.execute.backends.local.backend:LocalBackend",
)
