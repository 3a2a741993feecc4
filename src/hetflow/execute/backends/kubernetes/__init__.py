"""The Kubernetes backend: each step attempt is a Job created through the API server, placed
by the cluster's own kube-scheduler, watched through the API.  Shaped like every backend
package:

    settings.py   KubernetesSettings, read from the config file's ``kubernetes:`` section
    api.py        KubeApi: a small REST client over httpx (kubeconfig via the official loader)
    translate.py  Job -> the Job, its ResourceClaimTemplate, a gang's Service (pure)
    states.py     a Job and its pods -> JobState (pure)
    inventory.py  Nodes and ResourceSlices -> the planner's node types
    logs.py       pod logs followed into hetflow's log files
    informer.py   the run's Jobs and pods kept in memory by two API watches (what ``poll`` reads)
    backend.py    KubernetesBackend: check, submit, poll, watch, cancel, release

Names load on first use (``hetflow.lazy``): importing the package, or its ``plugin``,
imports nothing of the engine's; ``api`` imports httpx, and the kubeconfig loader (the
``kubernetes`` client) is imported when a backend first talks to a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.execute.backends.kubernetes.api import KubeApi
    from hetflow.execute.backends.kubernetes.backend import KubernetesBackend
    from hetflow.execute.backends.kubernetes.inventory import Inventory, KubeNode, node_types, read_nodes
    from hetflow.execute.backends.kubernetes.settings import KubernetesSettings
    from hetflow.execute.backends.kubernetes.states import job_state, pod_state
    from hetflow.execute.backends.kubernetes.translate import Placement, cel_selectors, job_objects, object_name

_WHERE = {
    "api": ["KubeApi"],
    "backend": ["KubernetesBackend"],
    "inventory": ["Inventory", "KubeNode", "node_types", "read_nodes"],
    "settings": ["KubernetesSettings"],
    "states": ["job_state", "pod_state"],
    "translate": ["Placement", "cel_selectors", "job_objects", "object_name"],
}

__all__ = [
    "Inventory",
    "KubeApi",
    "KubeNode",
    "KubernetesBackend",
    "KubernetesSettings",
    "Placement",
    "cel_selectors",
    "job_objects",
    "job_state",
    "node_types",
    "object_name",
    "pod_state",
    "read_nodes",
]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
