"""ResourceRequirement and cwltool:CUDARequirement as hetflow's request; cwltool's mount
arguments as hetflow mounts; the /bin/sh line that sets a job's directory and redirections."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.cwl.containers.container import Redirects, container_spec, mounts_from_args, wrapped_command
from hetflow.cwl.keep.cache import keepable
from hetflow.cwl.placement import choose_gpus
from hetflow.cwl.requests import MIB, MIN_MEMORY, job_request
from hetflow.errors import UsageError
from hetflow.inventory import Gpu


def test_resources_become_cores_and_memory() -> None:
    req = job_request({"cores": 2, "ram": 1024, "tmpdirSize": 512, "outdirSize": 1024}, None)
    assert (req.cpus, req.memory, req.gpus, req.tmpfs_mib) == (2.0, 1024 * MIB, 0, 512)


def test_a_tiny_ram_request_is_not_a_cage_podman_refuses() -> None:
    assert job_request({"cores": 1, "ram": 1}, None).memory == MIN_MEMORY


def test_cuda_requirement_becomes_the_gpu_request() -> None:
    cuda = {"cudaVersionMin": "11.4", "cudaComputeCapability": ["8.0", "7.5"], "cudaDeviceCountMin": 2}
    req = job_request({"cores": 1, "ram": 256, "cudaDeviceCount": 2}, cuda)
    assert (req.gpus, req.min_compute_capability, req.cuda_version_min) == (2, "7.5", "11.4")


def test_cuda_requirement_alone_asks_one_gpu() -> None:
    assert job_request({"cores": 1, "ram": 256}, {"cudaVersionMin": "11.0"}).gpus == 1


@pytest.mark.parametrize(
    ("resources", "cuda", "words"),
    [
        ({"cores": "two", "ram": 256}, None, "cores is 'two', not a number"),
        ({"cores": 0, "ram": 256}, None, "must be above 0"),
        ({"cores": 1, "ram": 256}, {"cudaComputeCapability": "sm_80"}, "cudaComputeCapability: 'sm_80'"),
        ({"cores": 1, "ram": 256}, {"cudaVersionMin": "eleven"}, "cudaVersionMin: 'eleven'"),
    ],
)
def test_bad_values_are_named(resources: dict[str, object], cuda: dict[str, object] | None, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        job_request(resources, cuda)


def test_mount_arguments_read_back_and_a_later_one_wins() -> None:
    args = [
        "--mount=type=bind,source=/h/out,target=/var/spool/cwl",
        '--mount="type=bind","source=/h/a,b","target=/var/lib/cwl/x",readonly',  # csv quoting, as cwltool writes
        "--mount=type=bind,source=/h/new,target=/var/spool/cwl",
        "--read-only=true",
    ]
    got = {m.target: (m.source, m.read_only) for m in mounts_from_args(args)}
    assert got == {"/var/spool/cwl": ("/h/new", False), "/var/lib/cwl/x": ("/h/a,b", True)}


def test_the_shell_line_keeps_the_tool_arguments_untouched() -> None:
    cmd = wrapped_command(["echo", "a b", "$HOME"], Redirects("/out dir", stdin="/in/x", stdout="/out dir/o.txt"))
    assert cmd[:2] == ("/bin/sh", "-c")
    assert cmd[2] == "cd '/out dir' && exec \"$@\" < /in/x > '/out dir/o.txt'"
    assert cmd[3:] == ("sh", "echo", "a b", "$HOME")


def _gpu(index: int, cc: str, cuda: str | None = None, vendor: str = "nvidia") -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index}",
        model=f"model-{cc}",
        memory_bytes=16 << 30,
        compute_capability=cc,
        vendor=vendor,
        driver_version="",
        cuda_version=cuda,
        device_path=f"/dev/nvidia{index}",
        minor=index,
    )


def test_a_cuda_job_gets_free_gpus_that_qualify() -> None:
    req = job_request({"cores": 1, "ram": 256, "cudaDeviceCount": 1}, {"cudaComputeCapability": "7.0"})
    gpus = [_gpu(0, "6.1"), _gpu(1, "8.0"), _gpu(2, "8.0")]
    assert [g.index for g in choose_gpus(gpus, req).gpus] == [1]
    assert [g.index for g in choose_gpus(gpus, req, busy={1}).gpus] == [2]
    held = choose_gpus(gpus, req, busy={1, 2})
    assert held.gpus == () and held.why == "0 of 2 qualifying GPUs free, 1 asked"


def test_why_no_gpu_serves_a_cuda_job() -> None:
    req = job_request({"cores": 1, "ram": 256}, {"cudaComputeCapability": "9.0", "cudaVersionMin": "12.2"})
    why = choose_gpus([_gpu(0, "8.0", "12.4"), _gpu(1, "9.0", "11.8")], req).why
    assert why == (
        "1 GPU(s) asked, 0 qualify: GPU 0 (model-8.0) has compute capability 8.0, below 9.0; "
        "GPU 1's driver supports CUDA 11.8, below 12.2"
    )
    assert choose_gpus([], req).why == "1 GPU(s) asked, 0 qualify: this node has no GPU"


def test_an_unknown_cuda_version_is_said_not_checked() -> None:
    req = job_request({"cores": 1, "ram": 256}, {"cudaVersionMin": "12.2"})
    assert "CUDA version of GPU [0] not known, not checked" in choose_gpus([_gpu(0, "8.0")], req).why


def test_the_image_entrypoint_runs_in_front_of_the_tool_under_the_shell_line() -> None:
    spec = container_spec(
        name="hf-r-s-1",
        run_id="r",
        step="s",
        cwl_name="s",
        image="docker.io/bash:4.4",
        command=["-c", "echo moo > cow"],
        io=Redirects("/out"),
        env={"HOME": "/out"},
        mounts=[],
        request=job_request({"cores": 1, "ram": 256}, None),
        user="1000:1000",
        network=False,
        log_path="/tmp/log",
        entrypoint=["/usr/local/bin/docker-entrypoint.sh"],
    )
    assert spec.entrypoint == ("/bin/sh", "-c", 'cd /out && exec "$@"', "sh")
    assert spec.command == ("/usr/local/bin/docker-entrypoint.sh", "-c", "echo moo > cow")
    assert spec.cap_add == () and spec.network is False  # not root: no capability given back


def test_the_cache_keeps_only_what_it_can_give_back(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text("x")
    assert keepable(0, tmp_path)
    assert not keepable(7, tmp_path)  # a success code other than 0 is an output ($(runtime.exitCode))
    (tmp_path / "empty").mkdir()
    assert not keepable(0, tmp_path)  # the cache holds files, not folders
    (tmp_path / "empty" / "f").write_text("")
    (tmp_path / "cwl.output.json").write_text("{}")
    assert not keepable(0, tmp_path)  # it may name this run's staging paths
