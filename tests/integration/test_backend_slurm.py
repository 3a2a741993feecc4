"""The Slurm backend on a local test cluster (two slurmd, fake GPUs: mknod'd device nodes,
so these tests prove placement and isolation, not GPU computation): the backend contract,
GPU isolation by gres, pinning, gres types, failed dependencies, scancel, logs.  The
contract's node failures kill a node's slurmd (``slurm_fixture.kill_slurmd``), which is
started again after each test."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from demo.images import build_tiny_image
from demo.slurm.cluster import LocalSlurm

from hetflow.config import engine_env
from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.slurm import SlurmBackend, SlurmSettings, sbatch_args
from hetflow.execute.logs import read_lines
from hetflow.execute.settings import Settings
from tests.contract.backend_contract import BUSYBOX, BackendContract, OrderingContract, job, wait_done
from tests.contract.gang_contract import GangContract
from tests.contract.node_contract import NodeFailureContract, NodeFault
from tests.integration.slurm_fixture import kill_slurmd, restart_slurmd, slurm_cluster

__all__ = ["slurm_cluster"]  # the module-scoped cluster fixture, used below

A100 = "NVIDIA A100-SXM4-40GB"
T4 = "Tesla T4"


@pytest.fixture(scope="module")
def backend(slurm_cluster: LocalSlurm) -> SlurmBackend:
    build_tiny_image(BUSYBOX)
    b = SlurmBackend(slurm_cluster.settings())
    b.check()
    return b


@pytest.fixture
def fresh_backend(slurm_cluster: LocalSlurm) -> SlurmBackend:
    return SlurmBackend(slurm_cluster.settings())


class SlurmNodeFault:
    """A node's slurmd killed and the node set DOWN (what slurmctld does after SlurmdTimeout).
    The next attempt is pinned to a node still up, as the runner moves a step off a failed
    node: the killed slurmd's own slurmstepd may answer slurmctld once more, and
    ReturnToService=2 then puts the node back in service without a slurmd to start a job."""

    def __init__(self, cluster: LocalSlurm) -> None:
        self.cluster, self.down = cluster, list[str]()

    def place(self, job: Job) -> Job:
        up = [n.name for n in self.cluster.nodes if n.name not in self.down]
        return replace(job, node=up[0]) if self.down else job

    def fail(self, node: str) -> None:
        self.down.append(node)
        kill_slurmd(self.cluster, node)


@pytest.fixture
def node_fault(slurm_cluster: LocalSlurm) -> Iterator[NodeFault]:
    fault = SlurmNodeFault(slurm_cluster)
    yield fault
    for node in fault.down:  # slurmctld's kill then reaches the lost job's container
        restart_slurmd(slurm_cluster, node)


def rid() -> str:
    return f"s{time.time_ns() % 10**9}"


def wait_for(backend: SlurmBackend, run_id: str, ok: object, timeout: float = 60) -> dict[str, JobState]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        states = backend.poll(run_id)
        if ok(states):  # type: ignore[operator]
            return states
        time.sleep(0.2)
    raise AssertionError(f"condition not met in {timeout}s: {backend.poll(run_id)}")


def gpu_job(name: str, out: Path, run_id: str, *, gpus: int = 0, model: str | None = None, **kw: object) -> Job:
    """Records what the container sees: its nvidia device nodes (name and major:minor in
    hex, as stat prints them) and CUDA_VISIBLE_DEVICES; lasts long enough to overlap."""
    script = (
        "for d in /dev/nvidia*; do [ -e $d ] && stat -c '%n %t:%T' $d; done > /out/devs; "
        "echo ${CUDA_VISIBLE_DEVICES:-unset} > /out/cvd; sleep 4"
    )
    return replace(job(name, out, script, run_id=run_id, gpus=gpus), gpu_model=model, **kw)  # type: ignore[arg-type]


def devs(out: Path) -> set[str]:
    return set((out / "devs").read_text().splitlines())


class TestSlurmBackend(BackendContract, OrderingContract, GangContract, NodeFailureContract):
    def test_capabilities(self, backend: SlurmBackend) -> None:
        caps = backend.capabilities
        assert (caps.name, caps.holds_dependencies, caps.assigns_gpus, caps.multi_node) == ("slurm", True, True, True)

    def test_two_gpu_jobs_on_one_node_see_disjoint_gpus_and_a_cpu_job_sees_none(
        self, backend: SlurmBackend, tmp_path: Path
    ) -> None:
        r = rid()
        a, b, c = (f"hf-{r}-{s}-1" for s in ("ga", "gb", "cpu"))
        backend.submit(gpu_job(a, tmp_path / "a", r, gpus=1, model=A100))
        backend.submit(gpu_job(b, tmp_path / "b", r, gpus=1, model=A100))
        backend.submit(gpu_job(c, tmp_path / "c", r, node="hf-a100"))
        # both GPU jobs hold a GPU of hf-a100 at the same time
        wait_for(backend, r, lambda s: all(n in s and s[n].status == "RUNNING" for n in (a, b)))
        states = wait_done(backend, r, [a, b, c])
        assert {states[a].exit_code, states[b].exit_code, states[c].exit_code} == {0}
        assert states[a].node == states[b].node == states[c].node == "hf-a100"
        assert sorted([states[a].gpus, states[b].gpus]) == [(0,), (1,)]
        seen_a, seen_b = devs(tmp_path / "a"), devs(tmp_path / "b")
        # each sees its own GPU node (195 = 0xc3) plus nvidiactl (195:255), nothing else
        expected = {f"/dev/nvidia{g} c3:{g}" for g in (0, 1)}
        gpu_a = {d for d in seen_a if "nvidiactl" not in d}
        gpu_b = {d for d in seen_b if "nvidiactl" not in d}
        assert len(gpu_a) == len(gpu_b) == 1 and gpu_a | gpu_b == expected and not gpu_a & gpu_b
        assert "/dev/nvidiactl c3:ff" in seen_a & seen_b
        assert (tmp_path / "a" / "cvd").read_text() == (tmp_path / "b" / "cvd").read_text() == "0\n"
        assert devs(tmp_path / "c") == set()
        assert (tmp_path / "c" / "cvd").read_text() == "unset\n"
        backend.release([a, b, c])

    def test_pinned_jobs_land_on_their_nodes_and_a_gres_type_picks_its_node(
        self, backend: SlurmBackend, tmp_path: Path
    ) -> None:
        r = rid()
        on_t4, on_a100, t4_gpu = (f"hf-{r}-{s}-1" for s in ("pin-t4", "pin-a100", "t4gpu"))
        backend.submit(replace(job(on_t4, tmp_path / "p1", "true", run_id=r), node="hf-t4"))
        backend.submit(replace(job(on_a100, tmp_path / "p2", "true", run_id=r), node="hf-a100"))
        backend.submit(gpu_job(t4_gpu, tmp_path / "t4", r, gpus=1, model=T4))
        states = wait_done(backend, r, [on_t4, on_a100, t4_gpu])
        assert states[on_t4].node == "hf-t4" and states[on_a100].node == "hf-a100"
        assert states[t4_gpu].node == "hf-t4" and states[t4_gpu].exit_code == 0
        assert devs(tmp_path / "t4") == {"/dev/nvidia0 c3:0", "/dev/nvidiactl c3:ff"}
        backend.release([on_t4, on_a100, t4_gpu])

    def test_gres_files_say_which_device_a_gres_index_is(self, slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
        """Where gres.conf lists a node's files out of minor order, index i is the i-th listed."""
        dev = slurm_cluster.base / "dev" / "hf-a100"
        listed = (str(dev / "nvidia1"), str(dev / "nvidia0"))
        backend = SlurmBackend(slurm_cluster.settings(gres_files={"hf-a100": listed}))
        r = rid()
        name = f"hf-{r}-swapped-1"
        j = gpu_job(name, tmp_path / "s", r, gpus=1, model=A100)
        script = "stat -c '%n %t:%T' /dev/nvidia[0-9]* > /out/devs"
        backend.submit(replace(j, container=replace(j.container, command=("sh", "-c", script))))
        st = wait_done(backend, r, [name])[name]
        (index,) = st.gpus
        minor = listed[index][-1]
        assert devs(tmp_path / "s") == {f"/dev/nvidia{minor} c3:{minor}"}

    def test_a_job_whose_parent_fails_never_runs_and_says_why(self, backend: SlurmBackend, tmp_path: Path) -> None:
        r = rid()
        parent, child, grandchild = (f"hf-{r}-{s}-1" for s in ("parent", "child", "grandchild"))
        backend.submit(job(parent, tmp_path / "p", "exit 3", run_id=r))
        backend.submit(job(child, tmp_path / "c", "echo ran > /out/ran", run_id=r, depends_on=(parent,)))
        backend.submit(job(grandchild, tmp_path / "g", "echo ran > /out/ran", run_id=r, depends_on=(child,)))
        states = wait_done(backend, r, [parent, child, grandchild])
        assert states[parent].exit_code == 3 and not states[parent].dependency_failed
        for name in (child, grandchild):
            st = states[name]
            assert st.dependency_failed and st.status == "CANCELLED" and st.exit_code is None
            assert "DependencyNeverSatisfied" in st.reason and "without running it" in st.reason
        assert parent in states[child].reason and child in states[grandchild].reason
        assert not (tmp_path / "c" / "ran").exists() and not (tmp_path / "g" / "ran").exists()

    def test_scancel_stops_a_running_container_and_a_pending_job(self, backend: SlurmBackend, tmp_path: Path) -> None:
        r = rid()
        running, pending = f"hf-{r}-long-1", f"hf-{r}-after-1"
        backend.submit(job(running, tmp_path / "l", "sleep 120", run_id=r))
        backend.submit(job(pending, tmp_path / "a", "true", run_id=r, depends_on=(running,)))
        wait_for(backend, r, lambda s: running in s and s[running].status == "RUNNING")
        backend.cancel([pending])
        st = wait_done(backend, r, [pending], timeout=30)[pending]
        assert st.status == "CANCELLED" and st.exit_code not in (0, None) and not st.dependency_failed
        backend.cancel([running])
        st = wait_done(backend, r, [running], timeout=120)[running]
        assert st.exit_code not in (0, None), st
        # the script's own podman stop wrote the code: Slurm's SIGKILL after KillWait would have
        # ended the script before it could (an event, not a race against the clock)
        assert (backend.jobdir(r) / f"{running}.exit").is_file()
        wait_for(backend, r, lambda s: s[running].status == "CANCELLED", timeout=60)
        ps = subprocess.run(
            ["podman", "ps", "-a", "--filter", f"name=^{running}$", "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            env=engine_env(),
            check=True,
        )
        assert ps.stdout.strip() == ""  # stopped and removed (--rm), not left running outside the job

    @pytest.mark.parametrize("grace", [None, 0, 5], ids=["default", "grace-0", "grace-5s"])
    def test_cancel_with_a_grace_lets_the_step_save_and_ends_the_job(
        self, backend: SlurmBackend, tmp_path: Path, grace: int | None
    ) -> None:
        r = rid()
        name = f"hf-{r}-save-1"
        script = "trap 'echo saved > /out/x; exit 0' TERM; echo started; sleep 120 & wait"
        backend.submit(job(name, tmp_path / "s", script, run_id=r))
        log = tmp_path / "s" / "log"
        # the container runs, its trap set: the job script stops it from now on
        wait_for(backend, r, lambda s: log.exists() and ("stdout", "started") in read_lines(log)[0])
        backend.cancel([name], grace)
        st = wait_done(backend, r, [name], timeout=40)[name]
        assert st.exit_code is not None, st
        assert (tmp_path / "s" / "x").read_text() == "saved\n"  # the job script stopped the container with SIGTERM

    def test_logs_are_cri_records_and_podman_errors_reach_the_log(self, backend: SlurmBackend, tmp_path: Path) -> None:
        r = rid()
        ok, broken = f"hf-{r}-talk-1", f"hf-{r}-noimage-1"
        backend.submit(job(ok, tmp_path / "t", "echo out; echo err >&2", run_id=r))
        bad = job(broken, tmp_path / "n", "true", run_id=r)
        backend.submit(replace(bad, container=replace(bad.container, image="localhost/hetflow-test/absent:1")))
        states = wait_done(backend, r, [ok, broken])
        lines, _ = read_lines(tmp_path / "t" / "log")
        assert lines == [("stdout", "out"), ("stderr", "err")]
        assert states[broken].exit_code == 125
        lines, _ = read_lines(tmp_path / "n" / "log")
        assert any(s == "stderr" and t.startswith("hetflow: podman run exited 125") for s, t in lines), lines

    def test_exit_codes_outlive_slurms_memory_of_the_job(
        self, backend: SlurmBackend, slurm_cluster: LocalSlurm, tmp_path: Path
    ) -> None:
        """After MinJobAge slurmctld forgets a job and there is no sacct without slurmdbd:
        the exit file written by the job script still answers."""
        r = rid()
        name = f"hf-{r}-code-1"
        backend.submit(job(name, tmp_path / "x", "exit 7", run_id=r))
        wait_done(backend, r, [name])

        class Forgetful(SlurmBackend):
            def _squeue(self) -> list:  # type: ignore[type-arg]
                return []

        st = Forgetful(slurm_cluster.settings()).poll(r)[name]
        assert (st.running, st.exit_code) == (False, 7) and st.node in ("hf-a100", "hf-t4")

    def test_check_says_how_to_reach_slurm(self, slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
        bad = SlurmBackend(slurm_cluster.settings(slurm_conf=str(tmp_path / "missing.conf")))
        with pytest.raises(EngineError, match=r"SLURM_CONF.*munge"):
            bad.check()


def _job(**kw: object) -> Job:
    base = job("hf-r-s-1", Path("/tmp/hf-unused"), "true", run_id="r")
    return replace(base, **kw)  # type: ignore[arg-type]


WEIRD = "Weird GPU 9000"
SBATCH_CASES = {
    "a100-gres": ({"gpus": 2, "gpu_model": A100}, {}, ["--gres=gpu:a100:2"], ["--gpus"]),
    "t4-gres": ({"gpus": 1, "gpu_model": T4}, {}, ["--gres=gpu:t4:1"], ["--gpus"]),
    "unknown-model-any-gpu": ({"gpus": 1, "gpu_model": WEIRD}, {}, ["--gpus=1"], ["--gres"]),
    "configured-type": ({"gpus": 1, "gpu_model": WEIRD}, {"gres_types": {WEIRD: "w9k"}}, ["--gres=gpu:w9k:1"], []),
    "no-model": ({"gpus": 1}, {}, ["--gpus=1"], ["--gres"]),
    "pinned": ({"node": "n1", "node_class": "gpu.t4"}, {}, ["--nodelist=n1"], ["--constraint"]),
    "features": ({"node_class": "gpu.t4"}, {"use_features": True}, ["--constraint=gpu.t4"], []),
    "mem-rounds-up": ({"memory": 300 * 2**20 + 1, "cpus": 1.5}, {}, ["--mem=301M", "--cpus-per-task=2"], []),
    "partition-account-extra": (
        {},
        {"partition": "p", "account": "a", "extra_args": ("--time=5",)},
        ["--partition=p", "--account=a", "--time=5"],
        [],
    ),
    "name-and-comment": ({}, {}, ["--job-name=hf-r-s-1", "--comment=hetflow run=r", "--parsable"], ["--dependency"]),
}


@pytest.mark.parametrize(("changes", "settings", "wanted", "unwanted"), SBATCH_CASES.values(), ids=SBATCH_CASES.keys())
def test_sbatch_args(
    changes: dict[str, object], settings: dict[str, object], wanted: list[str], unwanted: list[str]
) -> None:
    args = sbatch_args(_job(**changes), SlurmSettings(**settings), [], Path("/shared/r"))  # type: ignore[arg-type]
    for w in wanted:
        assert w in args
    for u in unwanted:
        assert not any(a.startswith(u) for a in args), args


def test_settings_from_the_config_file_strings() -> None:
    s = SlurmSettings.from_backend(
        Settings(
            backend="slurm",
            workdir="/shared/hf",
            sections={
                "slurm": {
                    "partition": "gpu",
                    "gres_types": f"{T4}=t4, {A100} = a100",
                    "gres_files": "n1=/dev/nvidia2:/dev/nvidia3",
                    "extra_args": "--time=60 --qos=short",
                    "use_features": "true",
                }
            },
        )
    )
    assert (s.partition, s.workdir, s.extra_args, s.use_features) == (
        "gpu",
        "/shared/hf/slurm",
        ("--time=60", "--qos=short"),
        True,
    )
    assert s.gres_types == {T4: "t4", A100: "a100"} and s.gres_files == {"n1": ("/dev/nvidia2", "/dev/nvidia3")}


def test_settings_from_yaml_values() -> None:
    s = SlurmSettings.from_mapping(
        {
            "gres_types": {T4: "t4"},
            "gres_files": {"n1": ["/dev/nvidia1", "/dev/nvidia0"]},
            "extra_args": ["--time=5"],
            "use_features": True,
            "stop_timeout": 3,
        },
        engine="podman",
    )
    assert s.gres_types == {T4: "t4"} and s.gres_files == {"n1": ("/dev/nvidia1", "/dev/nvidia0")}
    assert (s.extra_args, s.use_features, s.stop_timeout, s.podman, s.workdir) == (
        ("--time=5",),
        True,
        3,
        "podman",
        None,
    )


def test_sbatch_args_dependencies() -> None:
    args = sbatch_args(_job(), SlurmSettings(), ["12", "13"], Path("/shared/r"))
    assert "--dependency=afterok:12:13" in args and "--kill-on-invalid-dep=yes" in args
