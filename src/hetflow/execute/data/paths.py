"""Where a run's files live under its work directory.

<workdir>/workflow.yaml            the workflow as it runs now (resume reads this)
<workdir>/workflow.vN.yaml         version N, kept when a resume applied an edited file
<workdir>/steps/<step>/out/        accepted outputs (moved here atomically)
<workdir>/steps/<step>/fence       the one attempt that may move them there (``fencing``)
<workdir>/attempts/<step>/<n>/out  an attempt's /out while it runs
<workdir>/logs/<step>.<n>.log      the container's log (k8s-file format)
<workdir>/executor.log             a detached executor's own output
<workdir>/stop-request             left by `hetflow stop` before it signals the executor

A run's folder is 0700 (``make_run_dir``): it holds the workflow with its env: values and the
run's data.  The containers, which run as the submitting user, reach the folders they use by
their bind mounts, whose own owner and mode count (the executor chowns the attempt's /out to
the submitter), never by walking down from the run's folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

RUN_DIR_MODE = 0o700


def make_run_dir(workdir: Path) -> None:
    """Make a run's folder, and the runs folder above it if it is made now, 0700 (issue 38:
    they were 0755, every local user reading the run's workflow, env: values and data)."""
    workdir.parent.mkdir(mode=RUN_DIR_MODE, parents=True, exist_ok=True)
    workdir.mkdir(mode=RUN_DIR_MODE, exist_ok=True)
    os.chmod(workdir, RUN_DIR_MODE)  # made earlier (its data fetched first), or under another umask


def container_name(run_id: str, step: str, attempt: int) -> str:
    """Deterministic, so a resumed run finds (adopts) its containers by name."""
    return f"hf-{run_id}-{step}-{attempt}"


@dataclass(frozen=True)
class RunPaths:
    workdir: Path

    @property
    def workflow(self) -> Path:
        return self.workdir / "workflow.yaml"

    @property
    def includes(self) -> Path:
        """The texts of the files the workflow's ``include:`` named, as they were read when
        it was recorded (JSON, path -> text): its recorded copy reads these, not the files."""
        return self.workdir / "include.json"

    def record_workflow(self, text: str, includes: Mapping[str, str]) -> None:
        """Keep the workflow's text and its include files' texts (``includes``) with the run."""
        self.workflow.write_text(text, encoding="utf-8")
        if includes:
            self.includes.write_text(json.dumps(dict(includes)), encoding="utf-8")

    def workflow_at(self, version: int) -> Path:
        """An older version of the workflow, kept by a resume that applied an edited file."""
        return self.workdir / f"workflow.v{version}.yaml"

    def workflow_version(self) -> int:
        """The version ``workflow`` holds: 1 as submitted, one more per applied edit."""
        n = 1
        while self.workflow_at(n).exists():
            n += 1
        return n

    @property
    def executor_log(self) -> Path:
        return self.workdir / "executor.log"

    @property
    def stop_request(self) -> Path:
        return self.workdir / "stop-request"

    def step_out(self, step: str) -> Path:
        return self.workdir / "steps" / step / "out"

    def step_out_text(self, step: str) -> str:
        """``step_out`` as a string, joined without pathlib's objects (a cached rerun asks
        10,000 times): a step's name is one plain path part (``NAME_RE``, items ``NAME.N``)."""
        if "/" in step or step in ("", ".", ".."):
            return str(self.step_out(step))
        return f"{os.fspath(self.workdir)}/steps/{step}/out"

    def staging(self, step: str, attempt: int) -> Path:
        return self.workdir / "attempts" / step / str(attempt) / "out"

    def log(self, step: str, attempt: int) -> Path:
        return self.workdir / "logs" / f"{step}.{attempt}.log"

    def batch(self, container: str) -> Path:
        """The folder of a batch container (``execute.batching``): its entry, items, exit codes."""
        return self.workdir / "batches" / container

    def checkpoints(self, step: str) -> Path:
        """A step's checkpoints, kept across its attempts, resumes and moves: CRIU images of
        its containers (``ATTEMPT.ID.tar`` named by ``ATTEMPT.json``) and ``app/``, the step's own
        state (HETFLOW_CHECKPOINT_DIR, ``checkpoint: {mode: app}``)."""
        return self.workdir / "checkpoints" / step

    def app_checkpoint(self, step: str) -> Path:
        """What a step sees as ``$HETFLOW_CHECKPOINT_DIR``: the same folder for every attempt."""
        return self.checkpoints(step) / "app"

    def rank_log(self, step: str, attempt: int, rank: int) -> Path:
        """Replica ``rank``'s log of a gang attempt (rank 0 writes the attempt's own log)."""
        return self.log(step, attempt) if rank == 0 else self.workdir / "logs" / f"{step}.{attempt}.rank{rank}.log"
