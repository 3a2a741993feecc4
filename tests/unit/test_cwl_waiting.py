"""The CWL runner watches its run before it submits a job (``hetflow.cwl.containers.waiting``).

podman's exit watch follows only containers started while it exists, plus those it lists
once as it begins; CI saw a scatter job submitted before the watch began, whose container
that listing missed, exit while its cwltool thread waited for ever.  The fake backend here
behaves as that watch does: it reports only jobs submitted while it watched."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from hetflow.cwl.launch import run_container
from hetflow.cwl.requests import JobRequest
from hetflow.cwl.session import Session
from hetflow.execute import ContainerSpec, Job, JobState


class WatchSeesLaterJobs:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.seen: set[str] = set()
        self.watching = False
        self.wakes: list[Callable[[], None]] = []

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None]:
        self.calls.append("watch")
        self.watching = True
        self.wakes.append(wake)
        return lambda: None

    def submit(self, job: Job) -> None:
        name = job.name
        self.calls.append(f"submit {name}")
        if self.watching:
            self.seen.add(name)  # followed from its start; one submitted before is never seen
        for wake in self.wakes:
            wake()

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {n: JobState(n, False, 0, "exited") for n in self.seen}

    def cancel(self, names: object, grace: int | None = None) -> None:
        self.calls.append("cancel")

    def release(self, names: object) -> None:
        self.calls.append("release")


def _spec(name: str) -> ContainerSpec:
    return ContainerSpec(name=name, image="busybox", command=("true",), user="0:0", labels={}, env={})


def test_the_run_is_watched_before_its_first_job_is_submitted_and_each_job_is_seen_to_end(tmp_path: Path) -> None:
    backend = WatchSeesLaterJobs()
    session = Session(workdir=tmp_path, backend=backend)  # type: ignore[arg-type]
    request = JobRequest(cpus=1, memory=64 * 2**20)
    codes: list[int] = []
    done = threading.Event()

    def job() -> None:
        codes.append(run_container(session, "each_1", _spec("hf-r-each_1-1"), request).exit_code)
        done.set()

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    finished = done.wait(60)  # it ends at once when seen; the bound only keeps a hang from hanging the suite
    session.close()
    assert backend.calls[:2] == ["watch", "submit hf-r-each_1-1"]
    assert finished and codes == [0]
