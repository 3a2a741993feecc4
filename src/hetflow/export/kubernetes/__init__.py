"""A plan as Kubernetes objects: ``hetflow export kubernetes WORKFLOW --cluster FILE``.

``export_kubernetes`` renders one planned run as plain objects of the core API, which a
user creates with ``kubectl create -f``; ``to_yaml`` writes them as one YAML stream
(same input, same bytes); ``validate_objects`` checks them against the Kubernetes
OpenAPI schema as the official Python client models it (``pip install kubernetes``).

What is created, in this order::

    PersistentVolumeClaim  workdir_claim (ReadWriteMany), unless claim_size=None
    ServiceAccount, Role, RoleBinding  hf-RUN: the driver may list the run's Jobs
                           and patch (un-suspend) exactly those Jobs, nothing else
    NetworkPolicy          hetflow-no-network: no ingress or egress for steps without
                           ``network: true`` (needs a CNI that enforces policies); the
                           namespace's one, the live backend's too (``hetflow.kube``)
    Job hf-RUN-STEP        one per planned step, created suspended
    Job hf-RUN             the driver: releases each step when its parents succeeded

A gang step (``gang:`` in the workflow, ``resources`` per replica) is instead, still
suspended and released by the driver::

    launcher torch|none    NetworkPolicy hf-RUN-STEP-gang (unless ``network: true``: the
                           replicas reach each other and DNS), Service hf-RUN-STEP
                           (headless, the gang port), Indexed Job hf-RUN-STEP (completions =
                           parallelism = replicas, pods named hf-RUN-STEP-INDEX.hf-RUN-STEP)
    launcher mpi           NetworkPolicy hf-RUN-STEP-gang, MPIJob hf-RUN-STEP (kubeflow
                           mpi-operator v2beta1: a launcher running mpirun -np N, N workers
                           running sshd; spec.runPolicy.suspend is what the driver flips)

The DAG: a Job per step, released by a driver Job
------------------------------------------------
Kubernetes Jobs have no dependencies, so something must order them.  Three ways were
weighed:

* An init container per step that waits for its parents' markers on the shared volume
  needs nothing but core objects, but every step's pod is scheduled at once and then
  *holds* its CPUs, memory and GPUs while it waits.  On a busy cluster that wastes the
  GPUs the plan meant for other steps, and it can deadlock: waiting children fill the
  nodes their parent needs (likely with the wide DAGs ``hetflow import wfcommons``
  makes).  A failed parent also leaves its children waiting forever.
* One Argo Workflow is the natural DAG (no pod before its turn, retries, a UI), but
  needs Argo installed, and Argo's ``wait`` sidecar talks to the API server, so a step
  without ``network: true`` could not be cut off from the network.
* Chosen: every step Job is created with ``suspend: true`` (no pod, nothing held) and a
  small driver Job un-suspends each one when all its parents have succeeded.  Only
  core objects, no controller to install; step pods get no service-account token and
  keep an exact deny-all NetworkPolicy; a failed step stops its descendants (they stay
  suspended, holding nothing) while independent branches finish.  The cost: the user
  must be allowed to create a Role and RoleBinding in the namespace, and the driver
  needs an image with ``sh`` and ``kubectl`` (``tools_image``).

The driver also does what the local runner does after a step (``runner`` and
``outputs.accept_outputs``): it checks the declared outputs exist, then renames the
attempt's directory into place, so a child only ever reads accepted outputs.  Its state
is the Jobs' status plus marker files, so a restarted driver pod picks up where it was.

On the shared volume (``paths.RunPaths`` under ``runs/RUN`` on the claim)::

    runs/RUN/attempts/STEP/1/out   a step's /out while it runs (emptied per pod)
    runs/RUN/steps/STEP/out/       accepted outputs, mounted read-only into children
    runs/RUN/steps/STEP/done       the driver's marker: accepted

Each step pod runs as the local runner's container does (``container.build_spec``,
``engine.run_args``): the submitter's UID:GID, all capabilities dropped, no privilege
escalation, a read-only root with a memory-backed /tmp, HOME=/tmp, the user's
environment minus the reserved keys, inputs read-only at /in/NAME/FILE, outputs at
/out, no network unless asked, and the command as the image's arguments.  Placement
follows the plan's node class: its GPU product and the step's GPU constraints as NVIDIA
GPU Feature Discovery labels, its CPU micro-architecture as node-feature-discovery
labels, its ``labels`` from the cluster file, and the step's ``node_selector``.

Modules (private; import from this package): ``_objects`` (``export_kubernetes``, the
step Jobs and run-wide objects), ``_placement`` (node affinity from the planned class),
``_driver`` (the driver Job, its RBAC and its sh script), ``_render`` (``to_yaml``),
``_validate`` (``validate_objects``; imports the ``kubernetes`` client only when called),
``_gang`` (gang steps: Indexed Job, Service, MPIJob, spread and the rank variables),
``_common`` (the run's context and volumes).  Kubernetes' vocabulary (label keys, resource
names, pod security, the Job name rule, a gang's values, the NetworkPolicy) is
``hetflow.kube``'s, shared with the live backend, so a step's pod is the same either way.  The MPIJob
schema (``mpijob-v2beta1.schema.yaml``) is package data, vendored from mpi-operator.
"""

from hetflow.export.kubernetes._common import DEFAULT_TOOLS_IMAGE
from hetflow.export.kubernetes._gang import DEFAULT_RDMA_RESOURCE
from hetflow.export.kubernetes._objects import export_kubernetes, pinned_image_for
from hetflow.export.kubernetes._placement import cpu_expressions, gfd_product
from hetflow.export.kubernetes._render import to_yaml
from hetflow.export.kubernetes._validate import validate_objects

__all__ = [
    "DEFAULT_RDMA_RESOURCE",
    "DEFAULT_TOOLS_IMAGE",
    "cpu_expressions",
    "export_kubernetes",
    "gfd_product",
    "pinned_image_for",
    "to_yaml",
    "validate_objects",
]
