"""What a queueing engine says of an attempt, as ``show`` reads it (issue 37, on Kubernetes: a
pod that went from ContainerCreating to Succeeded between two polls kept "pending:
ContainerCreating" as its succeeded step's reason, and GPUS said "-" for pods that got GPUs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.execute.backends.base import JobState
from hetflow.report import run_json
from tests.unit.builders import Outcome, world
from tests.unit.test_runner_cluster import CHAIN, QueueBackend, cluster_runner


class NeverSeenRunning(QueueBackend):
    """Says b waits for its container until it has ended, then what GPUs it got."""

    gpus: tuple[int | str, ...] = ()

    def poll(self, run_id: str) -> dict[str, JobState]:
        out = super().poll(run_id)
        for name, st in out.items():
            if "-b-" in name and st.running and name not in self.held:
                out[name] = replace(st, status="PENDING", reason="ContainerCreating")
            elif "-b-" in name:
                out[name] = replace(st, gpus=self.gpus)
        return out


@pytest.mark.parametrize("gpus", [(1, 0), ("1x nvidia.com/gpu",)], ids=["indices", "a-count"])
def test_a_job_that_ended_unseen_running_shows_its_outcome_and_the_gpus_it_got(
    tmp_path: Path, gpus: tuple[int | str, ...]
) -> None:
    w = world(
        tmp_path, CHAIN, outcomes={"a": [Outcome(files={"o": b"1"})], "b": [Outcome(files={"o": b"2"}, duration=3)]}
    )
    backend = NeverSeenRunning(w.engine)
    backend.gpus = gpus
    assert cluster_runner(w, backend).execute() == "succeeded"
    b = w.step("b")
    assert b.state == "succeeded" and not b.reason.startswith("pending:") and "planned" in b.reason, b.reason
    assert b.gpus == gpus
    row = next(r for r in run_json(w.store.run(w.run.id), w.store.steps(w.run.id))["steps"] if r["step"] == "b")
    assert (row["queued"], row["gpus"]) == (False, list(gpus))
    assert w.step("a").gpus == ()  # an engine that says nothing of a job's GPUs leaves them as they were
