"""Kubernetes: each step attempt is a batch/v1 Job (a gang: an Indexed Job and a headless
Service) created through the API server; the real kube-scheduler places its pods, the Job
controller runs them, and hetflow reads what happened from the API.

- ``submit`` creates the attempt's objects (``translate``): the Job first, then what it owns
  (a DRA ResourceClaimTemplate, a gang's Service) with an ownerReference to it, so deleting
  the Job deletes them.  An object that exists already is adopted (a resumed executor).  The
  creates run on a pool of client threads (``creations``) and ``submit`` returns at once:
  ``poll`` says an attempt still being created is pending, and one the API refused failed.
- ``poll`` reads the run's Jobs and pods (label ``hetflow.run``) and each attempt's state
  (``states``); ``watch`` keeps them in memory from API watches (``informer``; without one
  ``poll`` lists them) and wakes the runner on every change, so it polls when something happened.
- ``cancel`` deletes the Jobs with foreground propagation and the given grace, and waits (a
  bounded while) for their pods to go; ``release`` deletes finished Jobs the same way.
- Logs: while a runner watches, each pod's log is followed through the API
  (``pods/log?follow=true``) into the attempt's log file (``logs``); ``release`` and
  ``cancel`` have every started pod's log read before its Job (and pod) is deleted.
- GPUs: a state carries what the pod (a gang: rank 0's) got, its DRA devices or device-plugin
  GPUs as the API tells them (``devices``), read once per pod.
- Adoption is by label: a new backend instance finds the run's Jobs the same way.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from hetflow.config import engine_env
from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.common import TERMINATED_CODE, host_image_id
from hetflow.execute.backends.kubernetes.admission import fits, free_room, starting, template_requests
from hetflow.execute.backends.kubernetes.api import Conflict, Forbidden, KubeApi, NotFound
from hetflow.execute.backends.kubernetes.creations import Creations, Seen
from hetflow.execute.backends.kubernetes.devices import (
    ANNOTATION_DRA,
    Device,
    allocated,
    claim_name,
    dra_free,
    pod_gpus,
    slice_devices,
)
from hetflow.execute.backends.kubernetes.informer import Informer
from hetflow.execute.backends.kubernetes.inventory import Inventory
from hetflow.execute.backends.kubernetes.logs import ANNOTATION_LOGS, INDEX, LogFollowers
from hetflow.execute.backends.kubernetes.plugin import PLUGIN
from hetflow.execute.backends.kubernetes.settings import KubernetesSettings
from hetflow.execute.backends.kubernetes.states import job_state, pod_state, pods_usage
from hetflow.execute.backends.kubernetes.translate import Placement, allowed_nodes, job_objects, object_name, owned_by
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.engine import ContainerEngine, Usage
from hetflow.kube import ANNOTATION_JOB, LABEL_JOB, LABEL_RUN, NETWORK_POLICY, label_value, network_policy

# What a run needs to be allowed in its namespace (checked by ``check``, named when missing).
NEEDED = (
    ("create", "batch", "jobs"),
    ("delete", "batch", "jobs"),
    ("patch", "batch", "jobs"),
    ("list", "batch", "jobs"),
    ("watch", "", "pods"),
    ("list", "", "pods"),
    ("delete", "", "pods"),
    ("get", "", "pods/log"),
    ("create", "", "services"),
    ("list", "", "events"),
)
PATHS = {  # kind -> (resource, group/version): where ``KubeApi.ns`` puts it
    "Job": ("jobs", "batch/v1"),
    "Service": ("services", ""),
    "NetworkPolicy": ("networkpolicies", "networking.k8s.io/v1"),
    "ResourceClaimTemplate": ("resourceclaimtemplates", "resource.k8s.io/v1"),
    "ResourceClaim": ("resourceclaims", "resource.k8s.io/v1"),
}
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
FAILED_CREATE = {"fieldSelector": "involvedObject.kind=Job,reason=FailedCreate"}  # why a Job has no pod
SLICES_TTL = 30.0  # seconds a read of the ResourceSlices serves a pod's device lookups


class KubernetesBackend:
    capabilities = PLUGIN.capabilities

    @classmethod
    def from_settings(cls, settings: RunSettings, engine: ContainerEngine | None) -> KubernetesBackend:
        """The ``kubernetes:`` section; the cluster's nodes pull and run the images themselves."""
        return cls(KubernetesSettings.from_backend(settings))

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """None: the image is run on the nodes, whose engine is not asked here."""
        return None

    def __init__(self, settings: KubernetesSettings | None = None, api: KubeApi | None = None) -> None:
        self.settings = settings or KubernetesSettings()
        self._api = api
        self._gone: dict[str, JobState] = {}  # cancelled here: their Jobs are deleted
        self._states: dict[str, tuple[Any, JobState]] = {}  # job name -> its state, by its objects' versions
        self._followed: dict[str, Any] = {}  # job name -> the versions its pods' logs were last followed at
        self._seen: dict[str, list[Any]] = {}  # job name -> its pods when last polled (usage, logs)
        self._meta: dict[str, Any] = {}  # job name -> its Job's metadata when last polled (logs)
        self._gpus: dict[str, tuple[int | str, ...]] = {}  # pod name -> the GPUs it got
        self._slices: tuple[float, dict[Device, tuple[str, int | str]]] = (0.0, {})
        self._policy_made = False
        self._inventory: Inventory | None = None
        self._logs = LogFollowers()
        self._images: set[str] = set()
        self._wakes: list[Callable[[], None]] = []  # the runners watching (``watch``)
        self._informers: dict[str, Informer] = {}  # run id -> its Jobs and pods (``watch``)
        self._creations = Creations(self.settings.submit_threads, lambda: [w() for w in list(self._wakes)])

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self.settings)
        return self._api

    @property
    def _jobs(self) -> str:
        return self.api.ns(*PATHS["Job"])

    @property
    def inventory(self) -> Inventory:
        if self._inventory is None:
            self._inventory = Inventory(self.api)
        return self._inventory

    # the contract

    def check(self) -> None:
        """The API server answers, the namespace exists, and RBAC lets this user do what a run does
        (asked at once on the client threads; the first refused in NEEDED's order is named)."""
        api = self.api
        api.get("/version")

        def review(need: tuple[str, str, str]) -> None:
            verb, group, resource = need
            kind, _, sub = resource.partition("/")
            attrs = {"namespace": api.namespace, "verb": verb, "group": group, "resource": kind, "subresource": sub}
            ssar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"}
            answer = api.create(REVIEWS, {**ssar, "spec": {"resourceAttributes": attrs}})
            if not answer.get("status", {}).get("allowed"):
                full = f"{resource}.{group}" if group else resource
                raise EngineError(
                    f"Kubernetes RBAC does not let the kubeconfig's user {verb} {full} in namespace {api.namespace}: "
                    f"grant it with a Role and RoleBinding (kubectl create role hetflow --verb={verb} "
                    f"--resource={full} -n {api.namespace}; then a rolebinding to the user)"
                )

        self._creations.each(review, NEEDED)
        with contextlib.suppress(Forbidden):  # a user of one namespace may not read namespaces
            api.get(f"/api/v1/namespaces/{api.namespace}")
        try:
            self._policy()
        except Forbidden:
            raise EngineError(
                f"Kubernetes RBAC does not let the kubeconfig's user create networkpolicies in namespace "
                f"{api.namespace}, and NetworkPolicy {NETWORK_POLICY} (no network for steps without network: true) "
                "is not there: grant create on networkpolicies.networking.k8s.io, or have an admin create it "
                "(hetflow export kubernetes writes one)"
            ) from None

    def image_exists(self, image: str) -> bool:
        """Whether the image is there to run: on a node (each kubelet lists the images it
        holds in its Node's status), or, unless the pull policy is Never or the reference
        names no registry (``localhost/``), in a registry, which only the pod's start can tell
        (ErrImagePull: ``states`` makes it the attempt's failure, in Kubernetes' words)."""
        if image in self._images:
            return True
        held = {
            n
            for node in self.api.items("/api/v1/nodes")
            for i in node.get("status", {}).get("images") or ()
            for n in i.get("names") or ()
        }
        if image in held or f"docker.io/{image}" in held or f"docker.io/library/{image}" in held:
            self._images.add(image)
            return True
        return self.settings.image_pull_policy != "Never" and not image.startswith("localhost/")

    def image_id(self, image: str) -> str | None:
        return host_image_id(image, engine_env())

    def submit(self, job: Job) -> None:
        """The objects are made here (a bad job raises now); the API is asked on a client thread."""
        api = self.api  # made here, on one thread, for the client threads
        objects = job_objects(job, self.settings, self._placement(job))
        kube_job = objects[-1]
        logs = [r.log_path or "" for r in (job.ranks or (job.container,))]
        kube_job["metadata"]["annotations"][ANNOTATION_LOGS] = json.dumps(logs)
        if not job.container.network:
            self._policy()
        self._creations.start(job.name, lambda: self._create(api, objects, job.run_id))

    def created(self, names: Iterable[str]) -> None:
        """Wait until the creations of ``names`` are over (what ``submit`` handed to its threads)."""
        self._creations.wait(names)

    def _create(self, api: KubeApi, objects: list[dict[str, Any]], run_id: str) -> None:
        """The Job, then what it owns (on a client thread: ``KubeApi`` keeps a client per thread)."""
        kube_job = objects[-1]
        try:
            created = api.create(self._jobs, kube_job)
        except Conflict:  # submitted before (a resumed executor): adopt it
            created = api.get(f"{self._jobs}/{kube_job['metadata']['name']}")
        uid, name = created["metadata"]["uid"], created["metadata"]["name"]
        if informer := self._informers.get(run_id):
            informer.created(name)
        for obj in objects[:-1]:
            with contextlib.suppress(Conflict):
                api.create(api.ns(*PATHS[obj["kind"]]), owned_by(obj, uid, name))

    def poll(self, run_id: str) -> dict[str, JobState]:
        api = self.api
        jobs, pods, creating = self._objects(run_id)
        by_job: dict[str, list[Any]] = {}
        for p in pods:
            by_job.setdefault(p["metadata"].get("labels", {}).get(LABEL_JOB, ""), []).append(p)
        held = [j for j in jobs if j.get("spec", {}).get("suspend") and not j["metadata"].get("deletionTimestamp")]
        admitted = self._admit(held, starting(jobs, by_job)) if held else set()
        waiting = {j["metadata"]["name"] for j in held}
        out: dict[str, JobState] = {}
        failed_creates: dict[str, str] | None = None  # read once a Job without a pod asks
        for j in jobs:
            meta = j["metadata"]
            full = meta.get("annotations", {}).get(ANNOTATION_JOB, meta["name"])
            mine = by_job.get(meta["name"], [])
            if meta["name"] in waiting and meta["name"] not in admitted:
                n = j["spec"].get("completions", 1)
                pending = f"waiting for room for all {n} replicas at once (a gang is admitted all or nothing)"
            elif not mine and not j.get("status", {}).get("conditions"):
                failed_creates = self._failed_creates(run_id) if failed_creates is None else failed_creates
                pending = failed_creates.get(meta["name"], "")
            else:
                pending = ""
            versions = (meta.get("resourceVersion"), *(p["metadata"].get("resourceVersion") for p in mine))
            key = None if None in versions else (pending, *versions)  # None: objects not from an API server
            if key is None or self._states.get(full, (None,))[0] != key:  # changed since the last poll
                self._states[full] = (key, replace(job_state(full, j, mine, pending), native_id=meta["name"]))
            out[full] = self._states[full][1]  # native_id: kubectl get job NAME
            if gpus := self._gpus_of(mine):
                out[full] = replace(out[full], gpus=gpus)
            self._seen[full], self._meta[full] = mine, meta
            if self._wakes and (key is None or self._followed.get(full) != key):  # a runner watches
                self._logs.follow(api, meta, mine, soon=True)
                self._followed[full] = key
        out.update(self._creations.states(creating, set(out)))  # refused, or not listed yet
        for name, state in self._gone.items():
            if name.startswith(f"hf-{run_id}-"):
                out.setdefault(name, state)
        return out

    def _objects(self, run_id: str) -> tuple[list[Any], list[Any], dict[str, Seen]]:
        """The run's Jobs and pods (the watches' if live, else listed), and its creations as they
        stood before: one created meanwhile is not lost, nor one whose Job the watch has not told
        of yet (``Informer.reflects``: it is still pending, never vanished)."""
        creating = self._creations.before_lists()
        informer = self._informers.get(run_id)
        if informer is not None and (view := informer.view()) is not None:
            told = {n: replace(s, over=s.over and informer.reflects(view, object_name(n))) for n, s in creating.items()}
            return view.jobs, view.pods, told
        selector = f"{LABEL_RUN}={label_value(run_id)}"
        jobs = self.api.items(self._jobs, labelSelector=selector)
        return jobs, self.api.items(self.api.ns("pods"), labelSelector=selector), creating

    def _admit(self, held: list[dict[str, Any]], starting: list[tuple[dict[str, Any], int]]) -> set[str]:
        """Un-suspend the held gangs that fit now, oldest first (``admission``); their names.
        ``starting``: Jobs let go whose pods the job controller has not all made yet, with how
        many it has not: their room is taken first (else a gang admitted at the last poll, its
        pods not there yet, left room for another to be admitted over it)."""
        api = self.api
        try:
            every_pod = api.items("/api/v1/pods")
        except Forbidden:  # a user of one namespace: its own pods are what it can count
            every_pod = api.items(api.ns("pods"))
        dra = any(ANNOTATION_DRA in (j["spec"]["template"].get("metadata", {}).get("annotations") or {})
                  for j in [*held, *(j for j, _ in starting)])  # fmt: skip
        room = free_room(api.items("/api/v1/nodes"), every_pod, self._dra_free() if dra else None)
        for j, missing in starting:
            template = j["spec"]["template"]
            fits(room, template_requests(template), missing, allowed_nodes(template["spec"]))
        admitted = set()
        for j in sorted(held, key=lambda j: str(j["metadata"].get("creationTimestamp", ""))):
            template = j["spec"]["template"]
            need, n = template_requests(template), int(j["spec"].get("completions", 1))
            if fits(room, need, n, allowed_nodes(template["spec"])):
                api.patch(f"{self._jobs}/{j['metadata']['name']}", {"spec": {"suspend": False}})
                admitted.add(j["metadata"]["name"])
        return admitted

    def _dra_free(self) -> dict[str, dict[str, float]] | None:
        """Each node's DRA devices not allocated to a live pod's claim (``devices.dra_free``): the
        cluster's claims, or the namespace's where only those may be read; None where neither
        (nor the slices) may be: the gangs are then admitted on what else they ask."""
        api = self.api
        try:
            try:
                claims = api.items("/apis/resource.k8s.io/v1/resourceclaims")
            except Forbidden:
                claims = api.items(api.ns(*PATHS["ResourceClaim"]))
            return dra_free(api.items(SLICES), claims)
        except (Forbidden, NotFound):
            return None

    def _gpus_of(self, pods: list[Any]) -> tuple[int | str, ...]:
        """The GPUs the Job's pod (a gang: rank 0's) got, once known (``devices.pod_gpus``)."""
        if not pods:
            return ()
        pod = min(pods, key=lambda p: int(p["metadata"].get("annotations", {}).get(INDEX, 0)))
        name = pod["metadata"]["name"]
        if name not in self._gpus and pod.get("spec", {}).get("nodeName"):
            claims, devices = {}, self._slices[1]
            if claim := claim_name(pod):
                with contextlib.suppress(EngineError):  # RBAC without get resourceclaims: not shown
                    claims[claim] = self.api.get(f"{self.api.ns(*PATHS['ResourceClaim'])}/{claim}")
                if any(d not in devices for d in allocated(claims.get(claim, {}))):
                    devices = self._slice_devices()
            found = pod_gpus(pod, claims, devices)
            if found is not None:
                self._gpus[name] = found
        return self._gpus.get(name, ())

    def _slice_devices(self) -> dict[Device, tuple[str, int | str]]:
        """The ResourceSlices' devices, read again at most every SLICES_TTL seconds."""
        at, devices = self._slices
        if time.monotonic() - at > SLICES_TTL:
            with contextlib.suppress(EngineError):
                devices = slice_devices(self.api.items(SLICES))
            self._slices = (time.monotonic(), devices)
        return devices

    def _failed_creates(self, run_id: str) -> dict[str, str]:
        """Why Jobs have no pod yet, in Kubernetes' words (a quota: FailedCreate), by Job name:
        the namespace's such events, watched (``informer``) or else listed once per poll (a
        list per Job, in turn, took 7 of a hundred steps' 24 seconds: issue 43)."""
        informer = self._informers.get(run_id)
        events = informer.events() if informer is not None else None
        try:
            events = self.api.items(self.api.ns("events"), **FAILED_CREATE) if events is None else events
        except EngineError:
            return {}
        return {str(e.get("involvedObject", {}).get("name")): str(e.get("message", "")) for e in events}

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        """Delete the Jobs (foreground: their pods first, each given ``grace`` seconds after
        SIGTERM; None: the pods' terminationGracePeriodSeconds) and wait for the pods to go."""
        api = self.api
        names = list(names)
        self._creations.settle(names)  # nothing is created after its Job is deleted
        for name in names:  # readers of their logs, started before the pods go
            self._logs.follow(api, self._meta.get(name, {}), self._seen.get(name, []))
        for name in names:
            pods = self._seen.get(name, [])
            ended = [pod_state(name, p) for p in pods]
            done = next((s for s in ended if not s.running), None)
            self._gone[name] = done or JobState(name, running=False, exit_code=TERMINATED_CODE, status="Cancelled")
            obj = object_name(name)
            api.delete(f"{self._jobs}/{obj}", propagationPolicy="Foreground", gracePeriodSeconds=grace)
            for p in pods:
                api.delete(f"{api.ns('pods')}/{p['metadata']['name']}", gracePeriodSeconds=grace)
        deadline = time.monotonic() + (grace if grace is not None else self.settings.stop_timeout) + 20
        wanted = {object_name(n) for n in names}
        while wanted and time.monotonic() < deadline:
            pods = api.items(api.ns("pods"), labelSelector=f"{LABEL_JOB} in ({','.join(sorted(wanted))})")
            if not pods:
                break
            time.sleep(0.2)
        self._logs.finish(wanted)  # what they wrote until they went

    def release(self, names: Iterable[str]) -> None:
        """Delete finished Jobs, each pod's log read first (``LogFollowers.read_before``), off
        the caller's thread (``Creations.later``; ``released`` waits)."""
        api = self.api
        names = list(names)
        self._creations.settle(names)
        jobs = {object_name(n): (self._meta.get(n, {}), self._seen.get(n, [])) for n in names}
        for name in names:
            for known in (self._gone, self._meta, self._states, self._followed):
                known.pop(name, None)
            for p in self._seen.pop(name, []):
                self._gpus.pop(p["metadata"]["name"], None)

        def delete() -> None:
            self._logs.read_before(api, jobs)
            self._creations.each(lambda job: api.delete(f"{self._jobs}/{job}", propagationPolicy="Foreground"), jobs)

        self._creations.later(delete)

    def released(self) -> None:
        """Wait until the Jobs released so far are deleted."""
        self._creations.drain()

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """Keep the run's Jobs and pods from the API's watches (``informer``); each change wakes the runner."""
        api = self.api
        sel = {"labelSelector": f"{LABEL_RUN}={label_value(run_id)}"}
        watches = {"jobs": (self._jobs, sel), "pods": (api.ns("pods"), sel)}
        watches["events"] = (api.ns("events"), FAILED_CREATE)  # why a Job has no pod: not labelled
        informer = self._informers[run_id] = Informer(api, watches, wake)
        informer.start()
        self._wakes.append(wake)

        def close() -> None:
            informer.close()
            if self._informers.get(run_id) is informer:
                del self._informers[run_id]
            self._wakes.remove(wake)
            self._creations.drain()  # the run's releases: none left behind
            self._logs.close()

        return close

    def usage(self, name: str) -> Usage:
        return pods_usage(name, self._seen.get(name, []))

    # placement

    def _placement(self, job: Job) -> Placement:
        nodes: tuple[str, ...] = ()
        if job.node:
            nodes = (job.node,)
        elif job.node_class:
            nodes = self.inventory.members(job.node_class)
        dra = False
        if job.gpus or (job.gpu_request is not None and job.gpu_request.any):
            mode = self.settings.gpu_api
            dra = mode == "dra" or (mode == "auto" and self.inventory.dra(nodes))
        return Placement(nodes=nodes, dra=dra)

    def _policy(self) -> None:
        """The namespace's deny-all policy for pods without network (``kube.network_policy``), once."""
        if self._policy_made:
            return
        api = self.api
        path = api.ns(*PATHS["NetworkPolicy"])
        try:
            api.create(path, network_policy())
        except (Conflict, NotFound):  # there already; NotFound: no NetworkPolicy API, nothing enforces one
            pass
        except Forbidden:  # RBAC is asked before existence: it may be there all the same (an admin's)
            try:
                api.get(f"{path}/{NETWORK_POLICY}")
            except (NotFound, Forbidden):
                raise Forbidden(f"cannot create NetworkPolicy {NETWORK_POLICY}") from None
        self._policy_made = True
