"""ResourceRequirement and cwltool:CUDARequirement as hetflow's request; cwltool's mount
arguments as hetflow mounts; the /bin/sh line that sets a job's directory and redirections."""

from __future__ import annotations

import pytest

from hetflow.cwl.container import Redirects, mounts_from_args, wrapped_command
from hetflow.cwl.requests import MIB, MIN_MEMORY, job_request
from hetflow.errors import UsageError


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
