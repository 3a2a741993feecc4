"""Starting one attempt: lease its GPUs, prepare its staging directory, record the intent
(the attempt row and the step's launching state, with the container's deterministic
name), then hand the job to the engine.  The intent comes first, so a crash between the
two is found and repaired by resume (``lifecycle.reconcile``)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from hetflow.errors import HetflowError
from hetflow.execute.backends.base import Backend, Job, Publish
from hetflow.execute.checkpoint import CheckpointImages, Restore
from hetflow.execute.checkpoint.app import prepare_app_checkpoint
from hetflow.execute.data.fencing import grant
from hetflow.execute.data.inputs import DataManifest
from hetflow.execute.data.paths import container_name
from hetflow.execute.data.watch import DataWatch
from hetflow.execute.devices.gpu import near_cpus
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.execute.gang.elastic import RESIZED, elastic_env, is_gang
from hetflow.execute.gang.mpicommands import launcher_command, mpi_env, worker_command
from hetflow.execute.gang.mpilaunch import (
    DEFAULT_PORT,
    PRIVSEP_DIR,
    ROOT_SSHD_CAPS,
    MpiFiles,
    MpiPeer,
    placeholder_host,
    write_mpi_files,
)
from hetflow.execute.gang.replicas import (
    LABEL_LAUNCHER,
    LABEL_RANK,
    LABEL_WORLD,
    layout,
    network_name,
    replica_env,
    replica_name,
)
from hetflow.execute.run.attempts import SUBMITTED, Active, Attempts
from hetflow.execute.run.dispatching.dispatch import Dispatch, Where
from hetflow.execute.run.launch.container import build_spec
from hetflow.execute.secrets import active
from hetflow.inventory import Gpu
from hetflow.plan import Slot
from hetflow.spec import GpuRequest, Step, Variant, Workflow
from hetflow.state import (
    LAUNCHING,
    QUEUED_PREFIX,
    RUNNING,
    AttemptRecord,
    AttemptStarted,
    InputsSeen,
    Lease,
    Note,
    RunRecord,
    StepRecord,
    Store,
    record,
)


@dataclass(frozen=True)
class Launch:
    """One attempt being launched, as ``Launcher.launch``'s helpers see it."""

    name: str
    step: Step
    vname: str
    variant: Variant
    attempt: int
    container: str
    gpus: tuple[Gpu, ...]
    slot: Slot | None
    why: str
    change: str


class Launcher:
    def __init__(
        self,
        *,
        store: Store,
        run: RunRecord,
        workflow: Workflow,
        backend: Backend,
        dispatch: Dispatch,
        attempts: Attempts,
        clock: Callable[[], float],
        pid: int,
        watch: DataWatch | None = None,
    ) -> None:
        self.store, self.run_id = store, run.id
        self.uid, self.gid = run.uid, run.gid
        self.paths = attempts.paths
        self.workflow_version = self.paths.workflow_version()  # what a resume's edit made it
        self.backend, self.dispatch, self.attempts = backend, dispatch, attempts
        self.clock, self.pid = clock, pid
        # the run's data as it is now: looked at again as each attempt launches (``data.watch``)
        self.watch = watch or DataWatch(DataManifest(), workflow.data, store)

    def launch(
        self,
        name: str,
        s: StepRecord,
        vname: str,
        gpus: tuple[Gpu, ...],
        why: str,
        slot: Slot | None = None,
        step: Step | None = None,
        change: str = "",
    ) -> None:
        """Start attempt ``s.attempts + 1`` of ``name``: lease, stage, record the intent, submit.
        ``slot``: a share or MIG step's hold on ``gpus[0]`` (None: the GPUs whole); ``step``:
        the step as this attempt runs it (its retry policy grew its resources or chose its
        fallback variant; None: as written); ``change``: what the policy changed, in words,
        kept as the attempt's message (a failure's message comes first)."""
        step = step or self.attempts.wf.steps[name]  # fan-outs expanded so far
        variant = step.resolved_variants()[vname]
        attempt = s.attempts + 1
        container = container_name(self.run_id, name, attempt)
        go = Launch(name, step, vname, variant, attempt, container, gpus, slot, why, change)
        if not self.dispatch.reserve(Lease("", self.run_id, name, attempt, container, self.pid), gpus, slot):
            return  # another process took them between our look and our grab
        spec, ranks = self._containers(go)
        where = self.dispatch.where(name)
        now = self.clock()
        self.record_intent(go, s, where, now)
        n = step.replicas
        act = Active(
            name,
            attempt,
            container,
            variant.resources.cpus * n,
            variant.resources.memory * n,
            tuple(g.uuid for g in gpus),
            why=why,
            variant=vname,
            node=where.node,
            replicas=n,
            change=change,
        )
        job = self._job(go, spec, ranks, where)  # before this attempt is active: its parents' names
        self.attempts.hold(act)
        try:
            self._submit(job)
        except HetflowError as exc:
            self.attempts.fail(act, None, str(exc))
            return
        self.submitted(act, now)
        self.attempts.watch_gpus(act)

    def _submit(self, job: Job) -> None:
        """Submit ``job``; one to be restored from a checkpoint that cannot be is started
        afresh (said in a note), so a bad image costs the work since, never the step."""
        r = job.restore
        if r is None:
            self.backend.submit(job)
            return
        images, start = CheckpointImages(self.paths), time.monotonic()  # a restore's seconds: the GPU kit reports them
        try:
            self.backend.submit(job)
        except HetflowError as exc:
            self._note(job.step, f"{exc}; attempt {job.attempt} starts from zero", "checkpoint")
            self.backend.submit(replace(job, restore=None))
            return
        images.note_restored(job.step, job.attempt, r)
        when = f"{time.strftime('%H:%M:%S', time.localtime(r.taken))} in {time.monotonic() - start:.2f}s"
        self._note(job.step, f"{job.name} restored from attempt {r.from_attempt}'s checkpoint of {when}", "restored")

    def _restore_point(self, go: Launch) -> Restore | None:
        """The checkpoint a new attempt starts from: the newest of an earlier attempt of a step
        with CRIU checkpoints, unless the retry policy changed what the step runs with."""
        c = go.step.checkpoint
        if c is None or not c.transparent or go.change or go.step.replicas > 1:
            return None
        saved = CheckpointImages(self.paths).latest(go.name, before=go.attempt)
        return CheckpointImages(self.paths).restore_point(saved) if saved is not None else None

    def _note(self, step: str, message: str, kind: str) -> None:
        record(self.store, Note(0, self.run_id, self.clock(), message, step, kind))

    def submitted(self, act: Active, now: float) -> None:
        """The engine took the attempt's job: the step runs (or, with a queueing engine, is
        queued until the engine's first answer says otherwise: note_wait on the next poll)."""
        if self.backend.capabilities.queues:
            act.waiting = SUBMITTED
            self.store.set_step(self.run_id, act.step, state=RUNNING, reason=f"{QUEUED_PREFIX}{SUBMITTED}")
        else:
            self.store.set_step(self.run_id, act.step, state=RUNNING)
        self.store.set_attempt(self.run_id, act.step, act.attempt, state=RUNNING)
        self.attempts.emit(
            AttemptStarted(0, self.run_id, now, f"{act.container} submitted", act.step, act.attempt, act.container)
        )

    def _containers(self, go: Launch) -> tuple[ContainerSpec, tuple[ContainerSpec, ...]]:
        """The attempt's staging folder made, its container built, and a gang's replicas."""
        name, step, variant, attempt, gpus = go.name, go.step, go.variant, go.attempt, go.gpus
        staging = self.paths.staging(name, attempt)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        os.chown(staging, self.uid, self.gid)
        self.paths.log(name, attempt).parent.mkdir(parents=True, exist_ok=True)
        prepare_app_checkpoint(name, step, self.paths, self.uid, self.gid)  # kept from earlier attempts
        # a gang's rank 0 sees its own share of the GPUs (the others: ``_gang_specs``)
        own = gpus[: variant.resources.gpus] if is_gang(step) else gpus
        spec = build_spec(
            run_id=self.run_id,
            step_name=name,
            step=step,
            variant=variant,
            attempt=attempt,
            uid=self.uid,
            gid=self.gid,
            paths=self.paths,
            access=self.dispatch.access(variant, own, go.slot),
            data=self.mounted(step),
            secrets=active().of(step.secrets),
        )
        if self.backend.capabilities.leases_gpus_here:
            spec = replace(spec, cpuset=near_cpus(own))
        ranks: tuple[ContainerSpec, ...] = ()
        if is_gang(step):
            lead = replace(spec, env={**spec.env, **self._elastic_env(name, step)})
            ranks = self._gang_specs(name, step, lead, gpus, attempt, variant)
        return spec, ranks

    def mounted(self, step: Step) -> DataManifest:
        """The run's data as the step's container is to mount it: looked at now."""
        self.watch.look(step)
        return self.watch.manifest

    def _elastic_env(self, name: str, step: Step) -> dict[str, str]:
        """An elastic gang's range and torchrun's elastic variables (``gang.elastic``), on this
        machine only (a cluster runs it at max); TORCHELASTIC_RESTART_COUNT: its growths so far."""
        if step.gang is None or step.gang.elastic is None or self.backend.capabilities.places_steps:
            return {}
        grown = sum(a.message.startswith(RESIZED) for a in self.store.attempts(self.run_id, name))
        return elastic_env(step, self.run_id, name, grown)

    def record_intent(self, go: Launch, s: StepRecord, where: Where, now: float) -> None:
        """The attempt row and the step's launching state, written before the engine is asked
        (a crash in between leaves an intent that ``reconcile`` launches again).  The step's data
        inputs as its launch found them come first of all (``data.watch``)."""
        variant, n = go.variant, go.step.replicas
        look = self.watch.look(go.step)
        grant(self.paths.step_out(go.name), go.attempt)  # only it may write the step's outputs now (``fencing``)
        indices = tuple(g.index for g in go.gpus)
        self.store.add_attempt(
            AttemptRecord(
                run_id=self.run_id,
                step=go.name,
                attempt=go.attempt,
                variant=go.vname,
                node=where.node,
                gpus=indices,
                gpu_uuids=tuple(g.uuid for g in go.gpus),
                container=go.container,
                image=variant.image,
                state=LAUNCHING,
                exit_code=None,
                started=now,
                ended=None,
                message=f"retry: {go.change}" if go.change else "",
                cpus=variant.resources.cpus * n,
                memory=variant.resources.memory * n,
                workflow_version=self.workflow_version,
            ),
            InputsSeen(look.digests, look.fingerprint) if look is not None else None,
        )
        gpu_text = go.slot.describe() if go.slot is not None else ",".join(map(str, indices)) or "none"
        self.store.set_step(
            self.run_id,
            go.name,
            state=LAUNCHING,
            variant=go.vname,
            node=where.node,
            gpus=list(indices),
            attempts=go.attempt,
            # this attempt's start (show's ELAPSED); a queued job's when its engine says (EngineView)
            started=None if self.backend.capabilities.queues else now,
            ended=None,
            reason=go.why,
            not_before=None,
            event=f"attempt {go.attempt}: variant {go.vname}, GPUs {gpu_text}, container {go.container} ({go.why})",
        )

    def _job(self, go: Launch, spec: ContainerSpec, ranks: tuple[ContainerSpec, ...], where: Where) -> Job:
        """What the backend is asked to run: the container (a gang's replicas), its resources,
        where the plan put it and, for an engine that orders jobs, the parents in flight."""
        step, res = go.step, go.variant.resources
        holds = self.backend.capabilities.holds_dependencies
        active = self.attempts.active
        return Job(
            name=go.container,
            run_id=self.run_id,
            step=go.name,
            attempt=go.attempt,
            container=ranks[0] if ranks else spec,
            cpus=res.cpus,
            memory=res.memory,
            gpus=res.gpus,
            gpu_model=where.gpu_model,
            gpu_vendor=where.gpu_vendor,
            node=where.pinned_node,
            node_class=where.node_class,
            depends_on=tuple(active[d].container for d in step.dependencies() if d in active) if holds else (),
            ranks=ranks,
            gang=step.gang if is_gang(step) else None,
            nodes=where.nodes,
            gpu_request=engine_request(go.variant, where),
            gpu_sharing=where.gpu_sharing,
            # an engine that orders jobs starts a child as soon as this job ends, before the executor
            # sees that end: the job moves its outputs (a gang's: rank 0's /out) into place itself
            publish=self._publish(go) if holds else None,
            restore=self._restore_point(go),
        )

    def _publish(self, go: Launch) -> Publish:
        """Where the job moves its outputs before it ends 0: its /out (a gang's rank 0's) to the
        step's folder that its children mount."""
        return Publish(str(self.paths.staging(go.name, go.attempt)), str(self.paths.step_out(go.name)), go.step.outputs)

    def _gang_specs(
        self, name: str, step: Step, lead: ContainerSpec, gpus: tuple[Gpu, ...], attempt: int, variant: Variant
    ) -> tuple[ContainerSpec, ...]:
        """Every replica's container: rank 0 is ``lead`` (the attempt's own name, /out and
        log); rank i gets its own scratch /out and log.

        On this machine (hetflow leases the GPUs) each replica also gets its own GPUs and the
        launch contract (``execute.gang.replicas``) on the gang's private network.  For a cluster
        engine (it assigns GPUs and nodes) the replicas are templates on the host network:
        the backend adds each one's GPUs and contract where it runs, and an MPI gang's hosts
        are placeholders (``mpilaunch.placeholder_host``) it fills in once the nodes are known.
        """
        assert step.gang is not None
        cluster = self.backend.capabilities.places_steps
        n, per = step.replicas, variant.resources.gpus
        job = lead.name
        names = [replica_name(job, i) for i in range(n)]
        ranks = layout(names, [self.dispatch.where(name).node] * n)
        net = "host" if cluster else network_name(job)
        mpi = None
        if step.gang.launcher == "mpi":
            hosts = [placeholder_host(i) for i in range(n)] if cluster else names
            # on the host network replicas may share a node: one sshd port each
            ports = [step.gang.port + i for i in range(n)] if cluster else [DEFAULT_PORT] * n
            mpi = self._mpi(name, attempt, hosts, ports, variant)
        specs = []
        for i in range(n):
            mine = gpus[i * per : (i + 1) * per]
            env = dict(lead.env)
            devices, cdi, groups = lead.devices, lead.cdi_devices, lead.group_add
            if not cluster:
                access = self.dispatch.access(variant, mine)  # the driver's mounts are alike for any GPUs
                env |= {**access.env, **replica_env(step.gang, ranks, i)}
                devices, cdi, groups = access.devices, access.cdi_devices, access.groups
            mounts = list(lead.mounts)
            command, labels = lead.command, {**lead.labels, LABEL_RANK: str(i), LABEL_WORLD: str(n)}
            caps: tuple[str, ...] = ()
            tmpfs: tuple[str, ...] = ()
            if mpi is not None:
                files, peers = mpi
                env |= mpi_env(peers[i], n, peers)
                mounts.append(Mount(str(files.directory), files.mount, read_only=True))
                exports = _mpi_exports(env, lead.env)
                if cluster:  # set by the backend where the replica runs, before it starts
                    exports = sorted({*exports, "HETFLOW_WORLD_SIZE", *(_GPU_VARS if per else ())})
                command = tuple(
                    launcher_command(files, lead.command, n, export=exports)
                    if i == 0
                    else worker_command(files, peers[i])
                )
                labels[LABEL_LAUNCHER] = "mpi"
                if self.uid == 0:
                    caps, tmpfs = ROOT_SSHD_CAPS, (f"{PRIVSEP_DIR}:rw,nosuid,nodev,size=1m,mode=0755",)
                    # the submitter is root, so the ranks are: Open MPI wants that said twice
                    env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
            if i > 0:
                scratch = self.paths.staging(name, attempt).parent / f"rank{i}"
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                os.chown(scratch, self.uid, self.gid)
                mounts = [Mount(str(scratch), "/out", read_only=False) if m.target == "/out" else m for m in mounts]
            spec = replace(
                lead,
                name=names[i],
                env=env,
                mounts=tuple(mounts),
                devices=devices,
                cdi_devices=cdi,
                group_add=groups,
                network_name=net,
                command=command,
                labels=labels,
                cap_add=caps,
                cpuset="" if cluster else near_cpus(mine),
                tmpfs=tmpfs,
                log_path=lead.log_path if i == 0 else str(self.paths.rank_log(name, attempt, i)),
            )
            specs.append(spec)
        return tuple(specs)

    def _mpi(
        self, name: str, attempt: int, hosts: list[str], ports: list[int], variant: Variant
    ) -> tuple[MpiFiles, list[MpiPeer]]:
        """The gang's ssh keys, configs and hostfile (``execute.gang.mpilaunch``), written next to
        the attempt's staging directory for the submitter's UID."""
        if not variant.command:
            raise HetflowError(f"step {name!r} uses launcher: mpi but has no command for mpirun to run")
        peers = [MpiPeer(rank=i, host=h, port=p) for i, (h, p) in enumerate(zip(hosts, ports, strict=True))]
        directory = self.paths.staging(name, attempt).parent / "mpi"
        shutil.rmtree(directory, ignore_errors=True)
        return write_mpi_files(directory, peers, owner=(self.uid, self.gid)), peers


_GPU_VARS = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _mpi_exports(env: dict[str, str], user_env: Mapping[str, str]) -> list[str]:
    """What mpirun passes from replica 0 to every rank (ssh sessions start bare): the GPU
    variables (every replica numbers its own GPUs 0..n-1 alike), hetflow's and the step's."""
    keep = {
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "HETFLOW_GPU_UUIDS",
        "HETFLOW_WORLD_SIZE",
        "HETFLOW_RUN_ID",
        "HETFLOW_STEP",
        "HETFLOW_ATTEMPT",
        "LD_LIBRARY_PATH",
        "PATH",
    }
    return sorted(k for k in env if k in keep or k in user_env)


def engine_request(variant: Variant, where: Where) -> GpuRequest | None:
    """What a cluster engine is asked for: the variant's request, except that a gpu_share
    step the plan placed on a whole GPU (an exclusive class, or a whole GPU finishing
    sooner) asks for that whole GPU."""
    if not variant.uses_gpu:
        return None
    req = variant.gpu_request
    if req.kind == "share" and not where.shared:
        return GpuRequest(count=1, vendor=req.vendor, memory=req.memory)
    return req
