"""The names Kubernetes (and podman) read from hetflow's objects: label and annotation keys,
the well-known keys hetflow reads or writes, the API's name grammar, and the one rule that
turns an attempt's or a step's name into a Job name."""

from __future__ import annotations

import hashlib
import re

# Every object hetflow makes carries these: a podman container as a Kubernetes Job and its
# pods (``podman ps --filter label=hetflow.run=RUN``, ``labelSelector=hetflow.run=RUN``).
LABEL_RUN = "hetflow.run"
LABEL_STEP = "hetflow.step"
LABEL_ATTEMPT = "hetflow.attempt"
LABEL_JOB = "hetflow.job"  # a live attempt's pods: their Job's object name (a gang's Service selects on it)
LABEL_NETWORK = "hetflow.network"  # none | allowed: what the deny-all NetworkPolicy selects on
LABEL_WORKFLOW = "hetflow.workflow"
LABEL_VARIANT = "hetflow.variant"
LABEL_CLASS = "hetflow.node-class"
LABEL_ROLE = "hetflow.role"  # an exported run's objects: step | driver
LABEL_REPLICA = "hetflow.replica"  # an MPIJob's pods: launcher | worker
MANAGED_BY = {"app.kubernetes.io/managed-by": "hetflow"}  # the recommended label (Kubernetes docs, "Common labels")

ANNOTATION_PLAN = "hetflow.plan"
ANNOTATION_REASONS = "hetflow.reasons"
ANNOTATION_IMAGE = "hetflow.image"  # the image as written, when it runs pinned
ANNOTATION_JOB = "hetflow.job-name"  # the attempt's full name when the object's is shortened
ANNOTATION_GPU_LINK = "hetflow.io/gpu-link"  # what a gang asked of its GPUs' links (no node label says it)

# Well-known keys (Kubernetes docs, "Well-Known Labels, Annotations and Taints").
HOSTNAME_LABEL = "kubernetes.io/hostname"
ARCH_LABEL = "kubernetes.io/arch"  # GOARCH spelling
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # the Job controller's, on an Indexed Job's pods

# The API's grammar (k8s.io/apimachinery/pkg/util/validation).
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][A-Za-z0-9_.-]{0,61})?[A-Za-z0-9])?\Z")
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
# An extended resource's name: a domain prefix and a name (rdma/hca, nvidia.com/gpu).
RESOURCE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")
# resource.Quantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go)
QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?\d+))?\Z")

# A Job's name is at most 56 characters: an Indexed Job's pods are NAME-INDEX and their
# hostname must stay a DNS label (63), so 7 are left for '-' and an index up to 999999.
NAME_MAX = 56


def job_name(name: str) -> str:
    """``name`` (hf-RUN-STEP exported, hf-RUN-STEP-ATTEMPT live) as a Job's name: as it stands
    when it is a DNS label of at most ``NAME_MAX`` characters; otherwise lower-cased, other
    characters as '-', cut, and a hash of the whole name appended, so two names never meet.

    One rule for both writers, made from the name alone: the live backend rebuilds an
    attempt's object name from its name when it cancels or releases it, knowing no gang size,
    so the room for an index is the same for every Job (an MPIJob's launcher, NAME-launcher,
    fits in it too)."""
    if DNS_LABEL_RE.match(name) and len(name) <= NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    plain = re.sub(r"[^a-z0-9-]+", "-", name.lower())[: NAME_MAX - 9].strip("-")
    return f"{plain}-{digest}"


def label_value(text: str) -> str:
    """``text`` as a label value: other characters become '-', at most 63, alphanumeric ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
