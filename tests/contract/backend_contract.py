"""The contract every backend passes (after snakemake-interface-executor-plugins' shared
tests): subclass ``BackendContract`` in a test module and provide the ``backend`` fixture
(and ``gpu_backend`` for a backend whose nodes have FAKE GPUs: mknod'd device nodes).

Jobs run tiny busybox containers; outputs go to a directory every node can see.  Every test
here is honest without containers too: the fake backend (tests/unit/test_backend_fake.py)
interprets the scripts and writes the same files, so checks that need a real container
(GPU device nodes inside it) live in the real backends' own test classes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hetflow.execute.backends.base import Backend, Job, JobState
from hetflow.execute.engine import ContainerSpec, Mount

BUSYBOX = "localhost/hetflow-test/busybox:latest"


def job(
    name: str, out: Path, script: str, *, gpus: int = 0, depends_on: tuple[str, ...] = (), run_id: str = "contract"
) -> Job:
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o777)
    spec = ContainerSpec(
        name=name,
        image=BUSYBOX,
        command=("sh", "-c", script),
        user=f"{os.getuid()}:{os.getgid()}",
        labels={"hetflow.run": run_id, "hetflow.step": name, "hetflow.attempt": "1"},
        env={"HOME": "/tmp"},
        mounts=(Mount(str(out), "/out", read_only=False),),
        cpus=1,
        memory=256 << 20,
        log_path=str(out / "log"),
    )
    return Job(
        name=name,
        run_id=run_id,
        step=name,
        attempt=1,
        container=spec,
        cpus=1,
        memory=256 << 20,
        gpus=gpus,
        depends_on=depends_on,
    )


def wait_done(backend: Backend, run_id: str, names: list[str], timeout: float = 120) -> dict[str, JobState]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        states = backend.poll(run_id)
        if all(n in states and not states[n].running for n in names):
            return states
        time.sleep(0.3)
    raise AssertionError(f"jobs {names} not finished in {timeout}s: {backend.poll(run_id)}")


class BackendContract:
    """Shared tests; ``run_id`` keeps each test's jobs apart."""

    def test_submit_runs_and_reports_exit_code(self, backend: Backend, tmp_path: Path) -> None:
        rid = f"c{time.time_ns() % 10**9}"
        backend.submit(job(f"hf-{rid}-ok-1", tmp_path / "ok", "echo hi > /out/x", run_id=rid))
        backend.submit(job(f"hf-{rid}-bad-1", tmp_path / "bad", "exit 3", run_id=rid))
        states = wait_done(backend, rid, [f"hf-{rid}-ok-1", f"hf-{rid}-bad-1"])
        assert states[f"hf-{rid}-ok-1"].exit_code == 0
        assert states[f"hf-{rid}-bad-1"].exit_code == 3
        assert (tmp_path / "ok" / "x").read_text() == "hi\n"
        backend.release([f"hf-{rid}-ok-1", f"hf-{rid}-bad-1"])

    def test_cancel_stops_a_running_job(self, backend: Backend, tmp_path: Path) -> None:
        rid = f"c{time.time_ns() % 10**9}"
        name = f"hf-{rid}-long-1"
        backend.submit(job(name, tmp_path / "long", "sleep 120", run_id=rid))
        backend.cancel([name])
        states = wait_done(backend, rid, [name], timeout=60)
        assert states[name].exit_code != 0
        backend.release([name])

    def test_a_new_backend_instance_adopts_by_name(
        self, backend: Backend, fresh_backend: Backend, tmp_path: Path
    ) -> None:
        """After a crash: another instance (another hetflow process) finds the job by name."""
        rid = f"c{time.time_ns() % 10**9}"
        name = f"hf-{rid}-adopt-1"
        backend.submit(job(name, tmp_path / "a", "sleep 2; echo done > /out/x", run_id=rid))
        seen = fresh_backend.poll(rid)
        assert name in seen
        states = wait_done(fresh_backend, rid, [name])
        assert states[name].exit_code == 0 and (tmp_path / "a" / "x").read_text() == "done\n"
        fresh_backend.release([name])


class OrderingContract:
    """For backends whose engine holds the DAG's order (capabilities.holds_dependencies)."""

    def test_dependencies_hold_when_the_engine_orders_jobs(self, backend: Backend, tmp_path: Path) -> None:
        assert backend.capabilities.holds_dependencies
        rid = f"c{time.time_ns() % 10**9}"
        first, second = f"hf-{rid}-first-1", f"hf-{rid}-second-1"
        shared = tmp_path / "shared"
        backend.submit(job(first, shared, "sleep 3; echo 1 > /out/first", run_id=rid))
        backend.submit(
            job(second, shared, "test -f /out/first && echo ok > /out/second", run_id=rid, depends_on=(first,))
        )
        states = wait_done(backend, rid, [first, second])
        assert states[second].exit_code == 0 and (shared / "second").read_text() == "ok\n"
