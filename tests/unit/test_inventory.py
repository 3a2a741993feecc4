"""CPU and memory probes: sample /proc files in, Cpu values and byte counts out."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import archspec.cpu
import pytest

from hetflow.errors import InventoryError
from hetflow.inventory import x86_64_level
from hetflow.inventory.cpu import parse_cpuinfo, probe_cpu, probe_memory

DATA = Path(__file__).parent / "data"


def sample(name: str) -> str:
    return (DATA / name).read_text()


@dataclass(frozen=True)
class CpuCase:
    file: str
    vendor: str
    model: str
    architecture: str
    microarchitecture: str
    level: int | None
    has_flag: str  # one feature the sample lists
    lacks_flag: str  # one it does not


CPU_CASES = [
    CpuCase(
        "cpuinfo-skylake_avx512.txt",
        "GenuineIntel",
        "Intel(R) Xeon(R) Gold 6132 CPU @ 2.60GHz",
        "x86_64",
        "skylake_avx512",
        4,
        "avx512f",
        "sha_ni",
    ),
    CpuCase(
        "cpuinfo-zen3.txt",
        "AuthenticAMD",
        "AMD Ryzen 9 5950X 16-Core Processor",
        "x86_64",
        "zen3",
        3,  # zen3 has AVX2 but no AVX-512
        "vaes",
        "avx512f",
    ),
    CpuCase(
        "cpuinfo-neoverse_n1.txt",
        "ARM",
        "ARM neoverse_n1",  # aarch64 cpuinfo has no model name; vendor + archspec name
        "aarch64",
        "neoverse_n1",
        None,
        "asimddp",
        "sve",
    ),
    CpuCase(
        "cpuinfo-ivybridge.txt",
        "GenuineIntel",
        "Intel(R) Xeon(R) CPU E5-2650 v2 @ 2.60GHz",
        "x86_64",
        "ivybridge",
        2,  # AVX but no AVX2/FMA, so not v3
        "avx",
        "avx2",
    ),
    CpuCase(
        "cpuinfo-k10.txt",
        "AuthenticAMD",
        "AMD Opteron(tm) Processor 6136",
        "x86_64",
        "k10",
        1,  # no SSSE3/SSE4.2, so not even v2
        "sse4a",
        "ssse3",
    ),
]


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.microarchitecture)
def test_probe_cpu_reads_sample_cpuinfo(case: CpuCase) -> None:
    cpu = probe_cpu(sample(case.file), cores=8)

    assert cpu.vendor == case.vendor
    assert cpu.model == case.model
    assert cpu.architecture == case.architecture
    assert cpu.microarchitecture == case.microarchitecture
    assert cpu.x86_64_level == case.level
    assert cpu.cores == 8
    assert case.has_flag in cpu.features
    assert case.lacks_flag not in cpu.features
    assert list(cpu.features) == sorted(set(cpu.features))


def test_probe_cpu_reads_only_the_first_processor_block() -> None:
    first = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: First\nflags\t\t: fpu sse\n"
    second = "processor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Second\nflags\t\t: avx\n"

    cpu = probe_cpu(first + "\n" + second, cores=2)

    assert cpu.model == "First"
    assert cpu.features == ("fpu", "sse")


def test_parse_cpuinfo_skips_leading_blank_lines() -> None:
    assert parse_cpuinfo("\n\nprocessor : 0\nmodel name : X\n") == {
        "processor": "0",
        "model name": "X",
    }


LEVEL_CASES = [
    pytest.param("x86_64", 1, id="x86_64-is-v1"),
    pytest.param("nehalem", 2, id="nehalem-v2"),
    pytest.param("haswell", 3, id="haswell-v3"),
    pytest.param("zen2", 3, id="zen2-v3"),
    pytest.param("icelake", 4, id="icelake-v4"),
    pytest.param("x86_64_v4", 4, id="v4-itself"),
    pytest.param("neoverse_n1", None, id="aarch64-none"),
]


@pytest.mark.parametrize(("target", "level"), LEVEL_CASES)
def test_x86_64_level_of_archspec_targets(target: str, level: int | None) -> None:
    assert x86_64_level(archspec.cpu.TARGETS[target]) == level


def test_probe_cpu_live_host_agrees_with_archspec() -> None:
    cpu = probe_cpu()

    assert cpu.architecture == platform.machine()
    assert cpu.microarchitecture == archspec.cpu.host().name
    assert cpu.cores == len(os.sched_getaffinity(0))
    assert cpu.features  # every Linux kernel prints flags/Features


MEMINFO_CASES = [
    pytest.param(sample("meminfo-64g.txt"), 65843236 * 1024, id="sample-file"),
    pytest.param("MemTotal:        1024 kB\n", 1024 * 1024, id="one-line"),
    pytest.param("MemFree: 1 kB\nMemTotal: 2048 kB\n", 2048 * 1024, id="not-first-line"),
]


@pytest.mark.parametrize(("text", "expected"), MEMINFO_CASES)
def test_probe_memory_parses_memtotal(text: str, expected: int) -> None:
    assert probe_memory(text) == expected


def test_probe_memory_without_memtotal_says_so() -> None:
    with pytest.raises(InventoryError, match="MemTotal"):
        probe_memory("MemFree: 1 kB\n")


GIB = 1024**3
TOTAL_KB = 65843236  # the sample's MemTotal
TOTAL = TOTAL_KB * 1024

CGROUP_CASES = [
    pytest.param({}, TOTAL, id="no-cgroup-files"),
    pytest.param({"memory.max": "max\n"}, TOTAL, id="v2-unlimited"),
    pytest.param({"memory.max": f"{8 * GIB}\n"}, 8 * GIB, id="v2-limit"),
    pytest.param({"memory.max": f"{128 * GIB}\n"}, TOTAL, id="v2-limit-above-total"),
    pytest.param({"memory/memory.limit_in_bytes": "9223372036854771712\n"}, TOTAL, id="v1-unlimited"),
    pytest.param({"memory/memory.limit_in_bytes": f"{4 * GIB}\n"}, 4 * GIB, id="v1-limit"),
    pytest.param(
        {"memory.max": f"{2 * GIB}\n", "memory/memory.limit_in_bytes": f"{4 * GIB}\n"},
        2 * GIB,
        id="v2-wins-over-v1",
    ),
    pytest.param({"memory.max": "garbage\n"}, TOTAL, id="unreadable-value"),
]


@pytest.mark.parametrize(("files", "expected"), CGROUP_CASES)
def test_probe_memory_honours_smaller_cgroup_limit(tmp_path: Path, files: dict[str, str], expected: int) -> None:
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)

    assert probe_memory(sample("meminfo-64g.txt"), cgroup_root=tmp_path) == expected


def test_probe_memory_live_is_positive_and_at_most_memtotal() -> None:
    total = probe_memory(Path("/proc/meminfo").read_text())

    assert 0 < probe_memory() <= total
