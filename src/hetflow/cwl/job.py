"""The CWL job class hetflow gives cwltool (``tool.HetflowCommandLineTool.make_job_runner``).

A ``ContainerCommandLineJob`` (through cwltool's docker job, whose volume staging it keeps:
InitialWorkDir, writable copies, created files), as cwltool's own PodmanCommandLineJob is,
whose container runs as a hetflow ``Job`` on the session's backend instead of ``docker run``
under cwltool.  cwltool still does everything around it: the command line, path mapping,
InitialWorkDir, environment, and collecting outputs once the job ends.  Its ``_execute`` is
handed a no-op in place of the container (``sh -c 'exit CODE'``) so that it records the
container's exit code and collects outputs exactly as it would have."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import cwltool.job
from cwl_utils.types import CWLObjectType
from cwltool.context import RuntimeContext
from cwltool.docker import DockerCommandLineJob
from cwltool.errors import UnsupportedRequirement, WorkflowException

from hetflow.cwl.containers.batch import BatchJob
from hetflow.cwl.containers.container import Redirects, container_spec, mounts_from_args
from hetflow.cwl.keep.cache import job_key, keepable
from hetflow.cwl.launch import Result, run_batch, run_container
from hetflow.cwl.placement import ClusterPlace, place_of
from hetflow.cwl.requests import CUDA_REQUIREMENT, JobRequest, job_request
from hetflow.cwl.session import Session, session_of
from hetflow.errors import HetflowError
from hetflow.execute import ContainerSpec, GpuAccess, Key, gpu_access

_logger = logging.getLogger("cwltool")  # cwltool's own logger: --quiet and --debug apply


def _placed_by_hetflow(cuda_req: CWLObjectType, requestCount: int) -> int:
    """cwltool asks nvidia-smi on the submitting machine; hetflow places a CUDA job on a
    node whose GPUs fit (``launch.run_container``), so the count asked is the count given."""
    return requestCount


cwltool.job.cuda_check = _placed_by_hetflow  # type: ignore[attr-defined]  # the one seam cwltool offers


class CannotPlace(Exception):
    """No GPU of the node can serve the job's CUDARequirement (the message says why)."""


class HetflowJob(DockerCommandLineJob):
    session: Session
    mounts_args: list[str]

    def run(self, runtimeContext: RuntimeContext, tmpdir_lock: threading.Lock | None = None) -> None:
        self.session = session_of(runtimeContext)
        super().run(runtimeContext, tmpdir_lock)

    def get_from_requirements(
        self,
        r: CWLObjectType,
        pull_image: bool,
        force_pull: bool,
        tmp_outdir_prefix: str,
        image_base_path: str | None = None,
    ) -> str | None:
        image = str(r.get("dockerImageId") or r.get("dockerPull") or "")
        if image and self.session.image_exists(image):
            return image
        for how in ("dockerFile", "dockerLoad", "dockerImport"):
            if how in r:
                raise UnsupportedRequirement(f"DockerRequirement.{how}: hetflow runs only images already built")
        if not image:
            raise UnsupportedRequirement("DockerRequirement without dockerPull or dockerImageId")
        raise WorkflowException(
            f"image {image} is not on this machine and hetflow pulls from no public registry here: "
            f"build it (or a stand-in tagged {image}) first"
        )

    def create_runtime(
        self, env: MutableMapping[str, str], runtime_context: RuntimeContext
    ) -> tuple[list[str], str | None]:
        """The mounts, as cwltool's docker job makes them (its staging, copies and created
        files), minus /tmp: hetflow's container has its own tmpfs there."""
        runtime: list[str] = []
        self.append_volume(runtime, os.path.realpath(self.outdir), self.builder.outdir, writable=True)
        self.add_volumes(
            self.pathmapper,
            runtime,
            any_path_okay=True,
            secret_store=runtime_context.secret_store,
            tmpdir_prefix=runtime_context.tmpdir_prefix,
        )
        if self.generatemapper is not None:
            self.add_volumes(
                self.generatemapper,
                runtime,
                any_path_okay=bool(self.builder.get_requirement("DockerRequirement")[1]),
                secret_store=runtime_context.secret_store,
                tmpdir_prefix=runtime_context.tmpdir_prefix,
            )
        self.mounts_args = runtime
        return [], None

    def _execute(
        self,
        runtime: list[str],
        env: MutableMapping[str, str],
        runtimeContext: RuntimeContext,
        monitor_function: Callable[[Any], None] | None = None,
    ) -> None:
        try:
            code = self._run_in_hetflow(runtime[-1], runtimeContext)
        except (HetflowError, CannotPlace) as err:
            # the job fails as a tool that exits 1 does (permanentFail), its reason said once,
            # without the traceback cwltool prints for an exception from a job
            _logger.error("[job %s] %s", self.name, err)
            code = 1
        saved = (self.stdin, self.stdout, self.stderr)
        self.stdin = self.stdout = self.stderr = None  # the container wrote them; the no-op must not truncate
        try:
            super()._execute(["/bin/sh", "-c", f"exit {code}", "sh"], env, runtimeContext, None)
        finally:
            self.stdin, self.stdout, self.stderr = saved

    def _run_in_hetflow(self, image: str, ctx: RuntimeContext) -> int:
        session = self.session
        command = [str(a) for a in self.command_line]
        environment = dict(self.environment)
        if ctx.secret_store is not None:
            command = cast(list[str], ctx.secret_store.retrieve(cast(Any, command)))
            environment = cast(dict[str, str], ctx.secret_store.retrieve(cast(Any, environment)))
        outdir = self.builder.outdir
        io = Redirects(
            workdir=outdir,
            stdin=self.stdin,
            stdout=None if self.stdout is None else os.path.join(outdir, self.stdout),
            stderr=None if self.stderr is None else os.path.join(outdir, self.stderr),
        )
        cuda = self.builder.get_requirement(CUDA_REQUIREMENT)[0]
        request = job_request(self.builder.resources, cuda)
        step = session.step_name(self.name)
        attempt = session.recorder.next_attempt(step) if session.recorder is not None else 1
        name = f"hf-{session.run_id}-{step}-{attempt}"
        access = None
        held: set[int] = set()
        if request.gpus and session.local:
            choice = session.take_gpus(request)
            if not choice.gpus:
                raise CannotPlace(f"CUDARequirement cannot be met here: {choice.why}")
            held = {g.index for g in choice.gpus}
            _logger.info("[job %s] placed on %s: %s", self.name, session.node.name if session.node else "", choice.why)
            access = gpu_access(list(choice.gpus), session.node) if session.node is not None else None
        try:
            where = (step, attempt, name)
            return self._contained(session, where, image, command, io, environment, request, access, held)
        finally:
            session.release_gpus(held)

    def _contained(
        self,
        session: Session,
        where: tuple[str, int, str],  # step, attempt, container name
        image: str,
        command: list[str],
        io: Redirects,
        environment: dict[str, str],
        request: JobRequest,
        access: GpuAccess | None,
        held: set[int],
    ) -> int:
        step, attempt, name = where
        spec = container_spec(
            name=name,
            run_id=session.run_id,
            step=step,
            attempt=attempt,
            cwl_name=self.name,
            image=image,
            command=command,
            io=io,
            env=environment,
            mounts=mounts_from_args(self.mounts_args),
            request=request,
            user=f"{session.uid}:{session.gid}",
            network=bool(self.networkaccess),
            log_path=str(session.workdir / "logs" / f"{step}.{attempt}.log"),
            max_cpus=float(os.cpu_count() or 1),
            access=access,
            entrypoint=session.image_entrypoint(image),
        )
        key = self._cache_key(spec, environment)
        pinned = session.image_id(image) if session.local else None
        if pinned is not None:  # the image the key names, whatever the tag points at later
            spec = replace(spec, image=pinned)
        if key is not None and session.cache is not None:
            scratch = session.workdir / "restore" / step
            source = session.cache.restore(key, session.run_id, step, Path(self.outdir), scratch)
            if source is not None:
                if session.recorder is not None:
                    session.recorder.cached(step, self.name, image=image, source_run=source)
                _logger.info("[job %s] cached: its result from run %s", self.name, source)
                return 0
        place = place_of(session.places, self.name) if session.places else None
        if session.batch > 1 and not held and not self.timelimit and access is None and place is None:
            result = self._batched(session, step, image, spec, command, io, environment)
        else:
            result = self._alone(session, (step, attempt, name), image, spec, request, held, place)
        for line in result.log_lines:
            sys.stderr.write(line + "\n")
        why = f"exceeded its time limit of {self.timelimit} s" if result.timed_out else ""
        if result.timed_out:
            _logger.warning("[job %s] %s", self.name, why)
        if session.recorder is not None:
            session.recorder.ended(step, result.exit_code, why, node=result.node, gpus=result.gpus)
        if key is not None and session.cache is not None and keepable(result.exit_code, Path(self.outdir)):
            session.cache.save(key, session.run_id, step, session.workflow, Path(self.outdir))
        return result.exit_code

    def _alone(
        self,
        session: Session,
        where: tuple[str, int, str],  # step, attempt, container name
        image: str,
        spec: ContainerSpec,
        request: JobRequest,
        held: set[int],
        place: ClusterPlace | None,
    ) -> Result:
        """The job in a container of its own (on a cluster: where its plan put it)."""
        step, attempt, name = where
        if session.recorder is not None:
            session.recorder.started(
                step,
                self.name,
                container=name,
                image=image,
                cpus=spec.cpus or 1.0,
                memory=request.memory,
                # a cluster's scheduler places it: its node is known when it ends (``ended``)
                node=session.node.name if session.node is not None and session.local else "",
                gpus=tuple(sorted(held)),
            )
        if place is not None:
            _logger.info("[job %s] %s", self.name, place.why)
        return run_container(session, step, spec, request, timelimit=self.timelimit, attempt=attempt, place=place)

    def _batched(
        self,
        session: Session,
        step: str,
        image: str,
        spec: ContainerSpec,
        command: list[str],
        io: Redirects,
        environment: dict[str, str],
    ) -> Result:
        """The job run in a batch with others that can share its container (``batch``)."""
        batched = BatchJob(
            key=step,
            cwl_name=self.name,
            image=image,
            spec=spec,
            io=io,
            command=(*session.image_entrypoint(image), *command),
            env={**environment},
        )
        got = session.batcher(lambda jobs: run_batch(session, jobs)).run(batched)
        return Result(got.exit_code, got.log_lines)

    def _cache_key(self, spec: ContainerSpec, environment: dict[str, str]) -> Key | None:
        """None where the image's identity is not known, or where the job changes its inputs
        in place (InplaceUpdateRequirement: a result restored from the cache would leave them
        unchanged, and the steps after it would read the old content): then nothing is cached."""
        if self.inplace_update:
            return None
        image_id = self.session.image_id(spec.image)
        if image_id is None:
            return None
        places = {self.builder.outdir: "$OUTDIR"}
        return job_key(
            image_id=image_id,
            command=[*(spec.entrypoint or ()), *spec.command],
            env=environment,  # cwltool's: not the GPUs' variables, which name the GPUs given this time
            network=spec.network,
            mounts=mounts_from_args(self.mounts_args),
            places=places,
        )


def job_class() -> type[HetflowJob]:
    return HetflowJob


__all__ = ["HetflowJob", "job_class"]
