"""The tool objects hetflow gives cwltool's loader (``LoadingContext.construct_tool_object``),
as Toil and Arvados do: every CommandLineTool's job runs through ``job.HetflowJob``; the
workflow, ExpressionTool and Operation classes are cwltool's own."""

from __future__ import annotations

from cwltool.command_line_tool import CommandLineTool
from cwltool.context import LoadingContext, RuntimeContext
from cwltool.job import ContainerCommandLineJob, JobBase
from cwltool.process import Process
from cwltool.workflow import default_make_tool
from ruamel.yaml.comments import CommentedMap

from hetflow.cwl.job import HetflowJob


class HetflowCommandLineTool(CommandLineTool):
    def make_job_runner(self, runtimeContext: RuntimeContext) -> type[JobBase]:
        """cwltool's choice (it puts the default image in as a DockerRequirement), with
        hetflow's job wherever cwltool would have run a container."""
        chosen = super().make_job_runner(runtimeContext)
        return HetflowJob if issubclass(chosen, ContainerCommandLineJob) else chosen


def make_tool(toolpath_object: CommentedMap, loadingContext: LoadingContext) -> Process:
    if isinstance(toolpath_object, dict) and toolpath_object.get("class") == "CommandLineTool":
        return HetflowCommandLineTool(toolpath_object, loadingContext)
    return default_make_tool(toolpath_object, loadingContext)
