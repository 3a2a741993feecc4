"""CWL batches (``hetflow.cwl.containers.batch``) at the seam: which jobs share a container, when a batch
is sent, what each job's script says, and each job's own result (the container is a fake
here: ``run`` is a function; tests/integration/test_cwl_runner.py runs real batches)."""

from __future__ import annotations

import threading
from pathlib import Path

from hetflow.cwl.containers.batch import (
    MOUNT,
    Batcher,
    BatchJob,
    JobResult,
    batch_spec,
    job_script,
    read_result,
    write_folder,
)
from hetflow.cwl.containers.container import Redirects
from hetflow.execute import ContainerSpec, Mount


def job(key: str, *, image: str = "img", mounts: tuple[Mount, ...] = (), cpus: float = 1.0) -> BatchJob:
    spec = ContainerSpec(
        name=f"hf-r-{key}-1", image=image, command=("x",), user="0:0", labels={}, env={}, mounts=mounts, cpus=cpus
    )
    return BatchJob(
        key=key, cwl_name=key, image=image, spec=spec, io=Redirects(f"/out/{key}"), command=("echo", key), env={}
    )


class Runs:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, jobs: list[BatchJob]) -> dict[str, JobResult]:
        with self.lock:
            self.batches.append([j.key for j in jobs])
        return {j.key: JobResult(int(j.key[1:]) % 2, [f"ran {j.key}"]) for j in jobs}


def run_all(batcher: Batcher, jobs: list[BatchJob]) -> dict[str, JobResult]:
    out: dict[str, JobResult] = {}
    threads = [threading.Thread(target=lambda j=j: out.__setitem__(j.key, batcher.run(j))) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_jobs_that_could_share_a_container_go_in_batches_of_at_most_n_each_with_its_own_result() -> None:
    runs = Runs()
    jobs = [job(f"j{i}") for i in range(7)] + [job(f"k{i}", image="other") for i in range(2)]
    got = run_all(Batcher(3, runs, linger=0.5), jobs)
    # however the threads arrive: every job once, at most 3 to a batch, one image to a batch
    assert sorted(k for b in runs.batches for k in b) == sorted(j.key for j in jobs)
    assert all(1 <= len(b) <= 3 for b in runs.batches) and len(runs.batches) >= 4
    assert all(len({k[0] for k in b}) == 1 for b in runs.batches)
    assert got["j3"] == JobResult(1, ["ran j3"]) and got["j4"] == JobResult(0, ["ran j4"])


def test_a_full_batch_is_sent_at_once_and_the_last_after_the_linger() -> None:
    runs = Runs()
    batcher = Batcher(2, runs, linger=3600.0)  # a full batch does not wait for the linger
    assert run_all(batcher, [job("j1"), job("j2")])["j2"].exit_code == 0
    assert runs.batches == [["j1", "j2"]] or runs.batches == [["j2", "j1"]]
    assert Batcher(2, runs, linger=0.01).run(job("j3")).log_lines == ["ran j3"]  # alone, after the linger


def test_a_job_whose_mount_collides_goes_to_another_batch() -> None:
    runs = Runs()
    a = job("j1", mounts=(Mount("/host/a", "/in/x"),))
    b = job("j2", mounts=(Mount("/host/b", "/in/x"),))  # the same target, another source
    c = job("j3", mounts=(Mount("/host/a", "/in/x"),))  # the same mount: shares
    Batcher(10, runs, linger=0.01).run(a)  # one alone, then the two that can share
    run_all(Batcher(10, runs, linger=2.0), [b, c])
    assert runs.batches[0] == ["j1"] and sorted(map(sorted, runs.batches[1:])) == [["j2"], ["j3"]]


def test_a_batch_that_cannot_run_fails_each_of_its_jobs_with_the_reason() -> None:
    def broken(jobs: list[BatchJob]) -> dict[str, JobResult]:
        raise RuntimeError("no engine")

    got = Batcher(2, broken, linger=0.01).run(job("j1"))
    assert got.exit_code == 255 and "no engine" in got.log_lines[0]


def test_the_script_quotes_env_workdir_command_and_redirections() -> None:
    j = BatchJob(
        key="s",
        cwl_name="s",
        image="img",
        spec=job("s").spec,
        io=Redirects("/out/dir with space", stdin="/in/f", stdout="o.txt"),
        command=("sh", "-c", "echo '$HOME' \"x\""),
        env={"HOME": "/out/dir with space", "V": "a'b"},
    )
    assert job_script(j).splitlines() == [
        "export HOME='/out/dir with space'",
        "export V='a'\"'\"'b'",
        "cd '/out/dir with space' || exit 1",
        "exec sh -c 'echo '\"'\"'$HOME'\"'\"' \"x\"' < /in/f > o.txt",
    ]


def test_the_batch_container_has_every_jobs_mounts_and_each_job_its_own_result(tmp_path: Path) -> None:
    jobs = [job("a", mounts=(Mount("/h/a", "/out/a"),)), job("b", mounts=(Mount("/h/b", "/out/b"),))]
    folder = tmp_path / "batch1"
    write_folder(folder, jobs)
    spec = batch_spec("hf-r-batch1-1", "batch1", jobs, folder, "/logs/batch1.1.log")
    assert {m.target for m in spec.mounts} == {"/out/a", "/out/b", MOUNT}
    assert (spec.entrypoint, spec.command) == (("/bin/sh",), (f"{MOUNT}/run",))
    assert (folder / "order").read_text() == "a\nb\n"
    (folder / "rc" / "a").write_text("3\n")
    (folder / "log" / "a").write_text("one\ntwo\n")
    assert read_result(folder, "a", 0) == JobResult(3, ["one", "two"])
    assert read_result(folder, "b", 137) == JobResult(137, [])  # the batch was killed before b ended
