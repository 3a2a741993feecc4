"""The Kubernetes backend as the registry lists it (``backends.plugin``): the ``kubernetes:``
section of the settings file is ``settings.KubernetesSettings``; without a cluster file it
plans on the nodes its API server lists (``inventory.list_nodes``).  Importing this module
imports neither httpx nor the Kubernetes client."""

from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.plugin import BackendPlugin

PLUGIN = BackendPlugin(
    name="kubernetes",
    help="one Job per step attempt, placed by the cluster's kube-scheduler, planned on the nodes its API server lists",
    capabilities=Capabilities(
        name="kubernetes", holds_dependencies=False, assigns_gpus=True, multi_node=True, queues=True, places_steps=True
    ),
    backend="hetflow.execute.backends.kubernetes.backend:KubernetesBackend",
    settings="hetflow.execute.backends.kubernetes.settings:KubernetesSettings",
    env={"HETFLOW_KUBE_NAMESPACE": "namespace", "HETFLOW_KUBE_CONTEXT": "context"},
    nodes="hetflow.execute.backends.kubernetes.inventory:list_nodes",
)
