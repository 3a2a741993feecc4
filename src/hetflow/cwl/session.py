"""One CWL invocation's hetflow side: its run id, work directory, backend and poller.

cwltool copies its RuntimeContext for every job (``RuntimeContext.copy`` is a shallow copy),
so the session rides along as one attribute of ``HetflowContext`` and every job finds it."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from cwltool.context import RuntimeContext

from hetflow.config import submitter
from hetflow.cwl.containers.batch import LINGER, Batcher, RunBatch
from hetflow.cwl.containers.waiting import Waiter
from hetflow.cwl.keep.cache import JobCache
from hetflow.cwl.keep.record import Invocation, Recorder
from hetflow.cwl.keep.storethread import StoreThread
from hetflow.cwl.placement import ClusterPlace, GpuChoice, choose_gpus, cluster_places
from hetflow.cwl.requests import DEFAULT_IMAGE, JobRequest
from hetflow.execute import DEFAULT_BACKEND, Backend, Settings, make_backend, new_run_id, plan_on_cluster
from hetflow.inventory import Node, discover

T = TypeVar("T")


@dataclass
class Session:
    workdir: Path  # logs and records of this invocation
    backend: Backend
    run_id: str = field(default_factory=new_run_id)
    default_image: str = DEFAULT_IMAGE
    uid: int = 0
    gid: int = 0
    recorder: Recorder | None = None  # where the run is kept in the store (None: nowhere)
    cache: JobCache | None = None  # hetflow's cross-run cache (None: --no-cache)
    workflow: str = ""  # the CWL file's name: the cache entries' workflow
    _images: dict[str, bool] = field(default_factory=dict)
    _names: dict[str, int] = field(default_factory=dict)
    _entrypoints: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _image_ids: dict[str, str | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    node: Node | None = None  # this machine as hetflow's inventory sees it (fake GPUs too)
    # the backend runs jobs on this machine (local): hetflow chooses a CUDA job's GPUs here;
    # a cluster backend is handed the job's GPU count and its scheduler places it
    local: bool = True
    _waiter: Waiter | None = None
    _busy_gpus: set[int] = field(default_factory=set)
    batch: int = 0  # jobs a container may run one after another (``batch``); 0 or 1: one each
    batch_linger: float = LINGER  # seconds a batch waits for one more job
    _batcher: Batcher | None = None
    _batches: int = 0
    # on a cluster backend with a cluster file: each planned step's place (``placement``)
    places: dict[str, ClusterPlace] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        home: Path,
        workflow: Path,
        *,
        default_image: str = DEFAULT_IMAGE,
        backend: Backend | None = None,
        cache: bool = True,
        settings: Settings | None = None,
        argv: Sequence[str] = (),
        resume: str | None = None,
    ) -> Session:
        """A new run in the store under ``home`` (HETFLOW_HOME), its work directory
        ``home/runs/RUN``; ``settings`` (its backend's) and the runner's ``argv`` are kept with it.
        ``resume``: the run of that id again instead (``cwl.control``)."""
        uid, gid = submitter()
        run_id = resume or new_run_id()
        node = discover(home)
        workdir = home / "runs" / run_id
        owner = StoreThread(home / "state.db")
        settings = settings or Settings()
        what = Invocation(workflow, tuple(argv), os.getcwd(), settings)
        try:
            # planned first: a workflow that cannot be placed leaves no run behind
            local = settings.backend == DEFAULT_BACKEND
            places = {} if local or settings.cluster is None else _plan(owner, workflow, settings, default_image)
            if resume:
                recorder = Recorder.reopen(owner, run_id)
            else:
                recorder = Recorder.create(owner, run_id=run_id, what=what, workdir=workdir, uid=uid, gid=gid)
        except BaseException:
            owner.close()
            raise
        return cls(
            workdir=workdir,
            backend=backend or make_backend(),
            run_id=run_id,
            default_image=default_image,
            uid=uid,
            gid=gid,
            recorder=recorder,
            cache=JobCache(owner, home / "cache") if cache else None,
            workflow=workflow.name,
            node=node,
            local=local,
            places=places,
        )

    def image_exists(self, image: str) -> bool:
        return self._once(self._images, image, self.backend.image_exists)

    def image_id(self, image: str) -> str | None:
        """The ID ``image`` names, looked up at the invocation's first job that runs it (one
        ``podman image inspect`` an image, not one a job); None where the backend cannot say.
        On this machine each job then runs that ID (``job.HetflowJob``), so a tag moved
        during the run changes neither what its jobs run nor the cache keys they are kept under."""
        return self._once(self._image_ids, image, self.backend.image_id)

    def image_entrypoint(self, image: str) -> tuple[str, ...]:
        """The image's ENTRYPOINT, () for none or where the backend cannot say."""
        return self._once(self._entrypoints, image, lambda i: self.backend.image_entrypoint(i) or ())

    def _once(self, known: dict[str, T], image: str, ask: Callable[[str], T]) -> T:
        """What the backend says of ``image``, asked once an invocation (the first answer kept,
        an unknown one too); the backend is asked outside the lock."""
        with self._lock:
            if image in known:
                return known[image]
        answer = ask(image)
        with self._lock:
            return known.setdefault(image, answer)

    def step_name(self, cwl_name: str) -> str:
        """A unique hetflow step name for a CWL job name (``step1_2``: step1's scatter item 2):
        lower-case letters, digits, ``-``, ``_`` and ``.``; a name seen again (a tool run twice in
        one invocation) gets ``.N``."""
        base = re.sub(r"[^a-z0-9_.-]+", "-", cwl_name.lower()).strip("-.") or "job"
        with self._lock:
            n = self._names.get(base, 0)
            self._names[base] = n + 1
        return base if n == 0 else f"{base}.{n}"

    def take_gpus(self, request: JobRequest) -> GpuChoice:
        """GPUs of this node for a CUDA job, held until ``release_gpus``; none, with the
        reason, where too few qualify or are free (cwltool's executor holds a CUDA job back
        while the node's GPUs are all taken, so a free one is there when one qualifies)."""
        with self._lock:
            choice = choose_gpus(self.node.gpus if self.node else (), request, self._busy_gpus)
            self._busy_gpus.update(g.index for g in choice.gpus)
            return choice

    def release_gpus(self, indices: set[int]) -> None:
        with self._lock:
            self._busy_gpus -= indices

    def batcher(self, run: RunBatch) -> Batcher:
        """The invocation's batcher (``batch``), sending its batches to ``run``."""
        with self._lock:
            if self._batcher is None:
                self._batcher = Batcher(self.batch, run, self.batch_linger)
            return self._batcher

    def next_batch(self) -> int:
        """A batch number no invocation of this run used (a resumed run's earlier batches
        keep their folders: a new batch must not find their jobs' exit codes)."""
        with self._lock:
            self._batches += 1
            while (self.workdir / "batches" / f"batch{self._batches}").exists():
                self._batches += 1
            return self._batches

    def waiter(self) -> Waiter:
        """The run's waiter, started: call it before submitting a job (``waiting``)."""
        with self._lock:
            if self._waiter is None:
                self._waiter = Waiter(self.backend, self.run_id)
            waiter = self._waiter
        waiter.start()
        return waiter

    def close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
        if self.recorder is not None:
            self.recorder.owner.close()


def _plan(owner: StoreThread, workflow: Path, settings: Settings, image: str) -> dict[str, ClusterPlace]:
    """The CWL file planned on the settings' cluster file as ``hetflow plan x.cwl --cluster``
    plans it (``static``), history winning over estimates as for any run."""
    from hetflow.cwl.static import workflow_yaml  # cwltool's loader: imported only to plan
    from hetflow.spec import parse_workflow

    loaded = parse_workflow(workflow_yaml(workflow, image), str(workflow))
    planned = owner.call(lambda store: plan_on_cluster(store, loaded, settings))
    return cluster_places(planned.plan.placements if planned.plan else {}, planned.classes)


class HetflowContext(RuntimeContext):
    """cwltool's RuntimeContext with the session (copied along to every job)."""

    hetflow: Session | None = None


def session_of(ctx: RuntimeContext) -> Session:
    session = getattr(ctx, "hetflow", None)
    if not isinstance(session, Session):
        raise RuntimeError("a hetflow CWL job ran without its session (HetflowContext.hetflow)")
    return session
