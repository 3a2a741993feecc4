"""The tool objects hetflow gives cwltool's loader (``LoadingContext.construct_tool_object``),
as Toil and Arvados do: every CommandLineTool's job runs through ``job.HetflowJob``; the
workflow, ExpressionTool and Operation classes are cwltool's own."""

from __future__ import annotations

import itertools
from collections.abc import Generator

from cwl_utils.types import CWLObjectType
from cwltool.command_line_tool import CallbackJob, CommandLineTool
from cwltool.context import LoadingContext, RuntimeContext
from cwltool.job import ContainerCommandLineJob, JobBase
from cwltool.process import Process
from cwltool.utils import OutputCallbackType, random_outdir
from cwltool.workflow import default_make_tool
from ruamel.yaml.comments import CommentedMap

from hetflow.cwl.job import HetflowJob
from hetflow.cwl.session import Session

_outdirs = itertools.count(1)


class HetflowCommandLineTool(CommandLineTool):
    def make_job_runner(self, runtimeContext: RuntimeContext) -> type[JobBase]:
        """cwltool's choice (it puts the default image in as a DockerRequirement), with
        hetflow's job wherever cwltool would have run a container."""
        chosen = super().make_job_runner(runtimeContext)
        return HetflowJob if issubclass(chosen, ContainerCommandLineJob) else chosen

    def job(
        self, job_order: CWLObjectType, output_callbacks: OutputCallbackType, runtimeContext: RuntimeContext
    ) -> Generator[JobBase | CallbackJob, None, None]:
        """With batches (``batch``): each job's own ``runtime.outdir`` in the container (the
        invocation's random one, then a number), so that jobs sharing a container never
        mount two output directories on one path.  A tool's absolute
        ``dockerOutputDirectory`` still wins (cwltool's rule); such jobs collide and go to
        batches of their own."""
        session = getattr(runtimeContext, "hetflow", None)
        if isinstance(session, Session) and session.batch > 1:
            runtimeContext = runtimeContext.copy()
            runtimeContext.docker_outdir = f"{random_outdir()}/{next(_outdirs)}"
        yield from super().job(job_order, output_callbacks, runtimeContext)


def make_tool(toolpath_object: CommentedMap, loadingContext: LoadingContext) -> Process:
    if isinstance(toolpath_object, dict) and toolpath_object.get("class") == "CommandLineTool":
        return HetflowCommandLineTool(toolpath_object, loadingContext)
    return default_make_tool(toolpath_object, loadingContext)
