"""Running Common Workflow Language (v1.0-v1.2) with hetflow (issue 40).

cwltool, the reference implementation, is the library that loads, validates, evaluates
expressions and builds each CommandLineTool job (as Toil and Arvados embed it); hetflow runs
each job's container.  Its rooms, read top to bottom:

    runner      the cwl-runner entry (``hetflow-cwl-runner``): cwltool's parser and main with
                hetflow's tool objects, executor and session
    tool        the CommandLineTool class cwltool's loader builds, whose jobs are hetflow's
    job         the job class: cwltool's container job whose container is a hetflow Job
    container   the ContainerSpec of one CWL job (mounts, /bin/sh redirections): pure
    requests    ResourceRequirement and cwltool:CUDARequirement as hetflow's request: pure
    launch      submit one container to the backend, wait, read its log, release
    session     one invocation's run id, work directory, backend, node; waiting its poller
    keep/       what the store keeps: record (the run, its steps and attempts), cache
                (hetflow's cross-run cache keyed on a job's image, command, env and inputs),
                storethread (the store's own thread)
    placement   which GPUs of the node a CUDA job gets, and why not
    static      a CWL file as a hetflow workflow, for ``hetflow plan x.cwl --explain``
    control     ``hetflow stop`` and ``resume`` of a CWL run: its runner ended, run again
"""

from typing import TYPE_CHECKING

from hetflow.lazy import lazy_names

if TYPE_CHECKING:
    from hetflow.cwl.control import cwl_invocation, resume_cwl_run, stop_cwl_run
    from hetflow.cwl.requests import JobRequest, job_request
    from hetflow.cwl.runner import main
    from hetflow.cwl.static import workflow_yaml

# loaded on first use: telling a CWL run from another (``hetflow stop``) loads no cwltool
_WHERE = {
    "control": ["cwl_invocation", "resume_cwl_run", "stop_cwl_run"],
    "requests": ["JobRequest", "job_request"],
    "runner": ["main"],
    "static": ["workflow_yaml"],
}

__all__ = ["JobRequest", "cwl_invocation", "job_request", "main", "resume_cwl_run", "stop_cwl_run", "workflow_yaml"]

__getattr__, __dir__ = lazy_names(__name__, _WHERE, __all__)
