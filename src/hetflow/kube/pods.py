"""What every step pod hetflow makes shares, live or exported: its security context, the
namespace's deny-all NetworkPolicy, and a gang's shape (an Indexed Job, its headless Service
and the launch contract's values as pod fields)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hetflow.kube.names import INDEX_ANNOTATION, LABEL_NETWORK, MANAGED_BY

Obj = dict[str, Any]

# One policy per namespace, selecting by label: every hetflow pod without ``network: true``
# in the namespace, live or exported, is cut off by the same object.  Not one per run: the
# live backend has no moment at which a run's policy could go (a run may be resumed any
# time), and an admin who does not let users create policies creates this one once.
NETWORK_POLICY = "hetflow-no-network"


def pod_security(uid: int, gid: int) -> Obj:
    """The pod's securityContext: the local runner's ``--user UID:GID`` and seccomp default.

    fsGroup is the submitter's group: a fresh block-backed volume (a new claim's ext4 root,
    root:root 0755) is made writable by that group, as a step's /out must be; volumes without
    ownership management (NFS, hostPath) ignore it.  OnRootMismatch skips the recursive
    change when the volume's root already fits, so a large shared claim is not walked on
    every pod start."""
    out: Obj = {"runAsUser": uid, "runAsGroup": gid}
    if uid != 0:
        out["runAsNonRoot"] = True
    out["fsGroup"] = gid
    out["fsGroupChangePolicy"] = "OnRootMismatch"
    out["seccompProfile"] = {"type": "RuntimeDefault"}
    return out


def container_security() -> Obj:
    """A container's securityContext: as podman's ``--cap-drop all``, ``--security-opt
    no-new-privileges``, ``--read-only`` on one machine."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": True,
    }


def network_policy(namespace: str | None = None) -> Obj:
    """No ingress or egress for hetflow's pods labelled ``hetflow.network: none`` (a policy of
    each type with no rules: Kubernetes docs, "Default deny all ingress and all egress
    traffic"; a CNI that enforces NetworkPolicy makes it so)."""
    meta: Obj = {"name": NETWORK_POLICY}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(MANAGED_BY)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": {
            "podSelector": {"matchLabels": {**MANAGED_BY, LABEL_NETWORK: "none"}},
            "policyTypes": ["Ingress", "Egress"],
        },
    }


# The launch contract's quantities (``execute.gang.replicas.Quantity``, the same literal:
# a unit test holds the two equal).
RankQuantity = Literal["rank", "world", "node_rank", "local_rank", "local_size", "master_addr", "port"]


def indexed(replicas: int) -> Obj:
    """An Indexed Job's spec fields: one pod per replica, its completion index the rank."""
    return {"completionMode": "Indexed", "completions": replicas, "parallelism": replicas}


def rank_values(job: str, replicas: int, port: int) -> dict[RankQuantity, Obj]:
    """The launch contract as pod fields: a pod is a node (one replica each, local rank 0 of
    1), its rank the Job's completion index, replica 0 reachable as JOB-0.JOB (the pods'
    subdomain is the headless Service named as the Job)."""
    index: Obj = {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}}
    return {
        "rank": index,
        "world": {"value": str(replicas)},
        "node_rank": index,
        "local_rank": {"value": "0"},
        "local_size": {"value": "1"},
        "master_addr": {"value": f"{job}-0.{job}"},
        "port": {"value": str(port)},
    }


def headless_service(meta: Obj, selector: Mapping[str, str], port: int) -> Obj:
    """The gang's Service: DNS names for its pods (JOB-INDEX.JOB), no virtual IP; rank 0's
    name resolves before its pod is Ready, so the others rendezvous early."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector),
            "publishNotReadyAddresses": True,
            "ports": [{"name": "gang", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
