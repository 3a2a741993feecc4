"""A CWL document as a hetflow workflow for planning (``hetflow plan x.cwl --explain``): one
hetflow step per CommandLineTool step (a subworkflow's steps named ``sub/step``), its image,
cores, memory and GPU request as ``requests.job_request`` gives them at run time, its
dependencies from the step inputs' sources.  An ExpressionTool or Operation runs in hetflow's
own process and is not a step; whoever depends on it depends on what it depends on.  Values
that are expressions are known only when the job is made; the plan uses CWL's defaults for them
and says so.  A scatter is planned as one job (its items are known only at run time)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from cwltool.command_line_tool import CommandLineTool
from cwltool.context import LoadingContext
from cwltool.load_tool import load_tool
from cwltool.main import setup_schema
from cwltool.process import Process, shortname
from cwltool.workflow import Workflow

from hetflow.cwl.requests import CUDA_REQUIREMENT, DEFAULT_IMAGE, MIB

DEFAULTS = {"coresMin": 1, "ramMin": 256}


def workflow_yaml(path: Path, default_image: str = DEFAULT_IMAGE) -> str:
    """The hetflow workflow YAML text that stands for the CWL file at ``path``."""
    logging.getLogger("cwltool").setLevel(logging.WARNING)  # not "Resolved ... to ..." before the plan
    setup_schema(argparse.Namespace(enable_ext=True), None)  # cwltool:CUDARequirement, as the runner reads it
    loading = LoadingContext({"enable_ext": True})
    process = load_tool(str(path.resolve()), loading)
    steps: dict[str, dict[str, Any]] = {}
    _walk(process, "", {}, steps, default_image)
    return yaml.safe_dump({"apiVersion": "hetflow/v1", "name": path.stem, "steps": steps}, sort_keys=False)


def _walk(
    process: Process, prefix: str, upstream: Mapping[str, set[str]], out: dict[str, dict[str, Any]], image: str
) -> set[str]:
    """Add the hetflow steps of ``process``; the names whose end ends it (what depends on it needs)."""
    if isinstance(process, CommandLineTool):
        name = (prefix or shortname(str(process.tool["id"]))).strip("/").replace("#", "") or "tool"
        needs = sorted(set().union(*upstream.values())) if upstream else []
        out[name] = _step(process, image, needs)
        return {name}
    if not isinstance(process, Workflow):
        return set().union(*upstream.values()) if upstream else set()  # an ExpressionTool: passes its inputs on
    ends: dict[str, set[str]] = {}  # workflow step -> the hetflow steps it ends with
    pending = list(process.steps)
    while pending:
        progressed = False
        for step in list(pending):
            sources = _sources(step.tool)
            if any(s in _step_ids(process) and s not in ends for s in sources):
                continue
            mine = {s: ends.get(s, set()) for s in sources}
            outer = [f for s in sources if s not in _step_ids(process) for f in upstream.get(s, set())]
            if outer:
                mine["__outer__"] = set(outer)
            sid = shortname(str(step.tool["id"]))
            ends[str(step.tool["id"])] = _walk(step.embedded_tool, f"{prefix}/{sid}", mine, out, image)
            pending.remove(step)
            progressed = True
        if not progressed:
            break
    return set().union(*ends.values()) if ends else set()


def _step_ids(wf: Workflow) -> set[str]:
    return {str(s.tool["id"]) for s in wf.steps}


def _sources(step: Mapping[str, Any]) -> list[str]:
    """The workflow steps a step's inputs come from (``#main/step1/out`` -> ``#main/step1``)."""
    found = []
    for inp in step.get("in", []):
        src = inp.get("source")
        for s in src if isinstance(src, list) else [src] if src else []:
            found.append(str(s).rsplit("/", 1)[0])
    return found


def _step(tool: CommandLineTool, image: str, needs: list[str]) -> dict[str, Any]:
    docker = tool.get_requirement("DockerRequirement")[0] or {}
    res = tool.get_requirement("ResourceRequirement")[0] or {}
    cuda = tool.get_requirement(CUDA_REQUIREMENT)[0]
    cores = _number(res.get("coresMin", res.get("coresMax")), DEFAULTS["coresMin"])
    ram = _number(res.get("ramMin", res.get("ramMax")), DEFAULTS["ramMin"])
    resources: dict[str, Any] = {"cpus": cores, "memory": f"{int(ram)}Mi" if ram * MIB >= 1 else "64Mi"}
    step: dict[str, Any] = {
        "image": str(docker.get("dockerPull") or docker.get("dockerImageId") or image),
        "command": ["cwl-job", shortname(str(tool.tool["id"]))],
        "resources": resources,
    }
    if cuda is not None:
        resources["gpus"] = int(_number(cuda.get("cudaDeviceCountMin"), 1))
        cc = cuda.get("cudaComputeCapability")
        if cc is not None:
            low = min(cc, key=lambda v: tuple(int(p) for p in str(v).split("."))) if isinstance(cc, list) else cc
            step["gpu"] = {"min_compute_capability": str(low)}
    if needs:
        step["needs"] = needs
    return step


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
