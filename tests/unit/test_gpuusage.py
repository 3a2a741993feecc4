"""Each attempt's GPU use, sampled from NVML (``execute.devices.usage``, ``inventory.gpus.nvmlusage``):
which processes are the attempt's, how samples add up, what NVML's answers become, and the
runner storing the figures.  No GPU here: NVML is a fake with pynvml's function names (the
same figures came from a real H100 in tools/gpu-check's run; docs/guides/real-gpu.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import hetflow.execute.devices.usage as usage_mod
from hetflow.execute.devices.usage import GpuSampler, GpuUsage, Tally, in_attempt
from hetflow.inventory import DeviceSample, NvmlUsage
from hetflow.report import run_json, trace_rows
from tests.unit.builders import gpu, node, world

V2_LINE = "0::/hetflow/hf-r1-train-1/libpod-3f2a\n"
V1_LINES = "12:memory:/hetflow/hf-r1-train-1\n11:cpu,cpuacct:/hetflow/hf-r1-train-1\n"


@pytest.mark.parametrize(
    ("text", "container", "mine"),
    [
        (V2_LINE, "hf-r1-train-1", True),
        (V1_LINES, "hf-r1-train-1", True),
        ("0::/hetflow/hf-r1-train-1-r2/libpod-9\n", "hf-r1-train-1", True),  # a gang replica
        ("0::/hetflow/hf-r1-train-10/libpod-9\n", "hf-r1-train-1", False),  # attempt 10 is not attempt 1
        ("0::/user.slice/session-1.scope\n", "hf-r1-train-1", False),
        ("", "hf-r1-train-1", False),  # a pid gone, or of another PID namespace
    ],
    ids=["v2", "v1", "gang-replica", "prefix-is-not-enough", "other", "unreadable"],
)
def test_which_processes_are_the_attempts(text: str, container: str, mine: bool) -> None:
    assert in_attempt(text, container) is mine


def test_samples_give_mean_and_peak_utilisation_and_the_attempts_own_memory() -> None:
    t = Tally(("GPU-a",))
    own = {10}
    t.add([DeviceSample(40, 5 << 30, ((10, 1 << 30), (99, 3 << 30)))], own.__contains__)
    t.add([DeviceSample(80, 6 << 30, ((10, 2 << 30), (99, 3 << 30)))], own.__contains__)
    assert t.result() == GpuUsage(60.0, 80.0, 2 << 30, "process", 2)


def test_without_a_process_of_its_own_the_memory_is_the_devices_and_says_so() -> None:
    t = Tally(("GPU-a", "GPU-b"))
    t.add([DeviceSample(10, 1 << 30, ()), DeviceSample(30, 2 << 30, ((99, 1 << 30),))], lambda pid: False)
    used = t.result()
    assert (used.util_mean, used.memory_peak, used.memory_of) == (20.0, 3 << 30, "device")
    assert used.fields()["gpu_memory_of"] == "device"


def test_unknown_answers_stay_unknown() -> None:
    t = Tally(("GPU-a",))
    t.add([DeviceSample(None, None, ((10, None),))], lambda pid: True)
    used = t.result()
    assert (used.util_mean, used.util_max, used.memory_peak, used.samples) == (None, None, None, 1)
    assert set(used.fields().values()) == {None}


class FakeSource:
    """A scripted usage source: the next answer per sample call."""

    def __init__(self, answers: list[DeviceSample | None]) -> None:
        self.answers = answers
        self.asked: list[str] = []
        self.closed = False

    def sample(self, uuid: str) -> DeviceSample | None:
        self.asked.append(uuid)
        return self.answers.pop(0) if self.answers else None

    def close(self) -> None:
        self.closed = True


def test_the_sampler_samples_at_watch_and_on_each_turn_and_forgets_a_stopped_attempt() -> None:
    src = FakeSource([DeviceSample(50, 1 << 30, ((7, 512 << 20),)), DeviceSample(100, 2 << 30, ((7, 1 << 30),))])
    sampler = GpuSampler(src, interval=3600, cgroup_of=lambda pid: V2_LINE if pid == 7 else "")
    try:
        sampler.watch("hf-r1-train-1", ["GPU-a"])  # one sample at once: a short step gets one
        sampler.sample_once()
        used = sampler.stop("hf-r1-train-1")
        assert used == GpuUsage(75.0, 100.0, 1 << 30, "process", 2)
        assert sampler.stop("hf-r1-train-1") is None
        sampler.sample_once()
        assert src.asked == ["GPU-a", "GPU-a"]  # nothing watched, nothing asked
    finally:
        sampler.close()
    assert src.closed


@dataclass
class _Util:
    gpu: int


@dataclass
class _Mem:
    used: int


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: Any


class FakeNvmlModule:
    """pynvml's functions that NvmlUsage calls, one device."""

    class NVMLError(Exception):
        pass

    def __init__(self, procs: list[_Proc] | None = None, util_fails: bool = False) -> None:
        self.procs = procs or []
        self.util_fails = util_fails
        self.inited = self.shut = False

    def nvmlInit(self) -> None:
        self.inited = True

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-real":
            raise self.NVMLError("Not Found")
        return "h"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> _Util:
        if self.util_fails:
            raise self.NVMLError("Not Supported")
        return _Util(87)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> _Mem:
        return _Mem(3 << 30)

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[_Proc]:
        return self.procs


def test_nvml_answers_become_samples_and_not_available_is_unknown() -> None:
    api = FakeNvmlModule([_Proc(10, 1 << 30), _Proc(11, (1 << 64) - 1)])  # NVML_VALUE_NOT_AVAILABLE
    src = NvmlUsage(api)
    assert src.sample("GPU-real") == DeviceSample(87, 3 << 30, ((10, 1 << 30), (11, None)))
    assert src.sample("GPU-fake") is None  # a fake GPU, or one that went away
    src.close()
    assert api.inited and api.shut


def test_a_call_nvml_does_not_support_leaves_only_that_figure_unknown() -> None:
    src = NvmlUsage(FakeNvmlModule(util_fails=True))
    assert src.sample("GPU-real") == DeviceSample(None, 3 << 30, ())


ONE_GPU = """
train:
  image: a
  resources: {cpus: 1, memory: 1Gi, gpus: 1}
"""


def test_the_runner_stores_each_gpu_attempts_use_and_show_and_trace_report_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = FakeSource([DeviceSample(64, 2 << 30, ())] * 4)
    made: list[GpuSampler] = []

    def sampler() -> GpuSampler:
        made.append(GpuSampler(src, interval=3600))
        return made[-1]

    monkeypatch.setattr(usage_mod, "nvml_sampler", sampler)
    w = world(tmp_path, ONE_GPU, node_=node(gpus=(gpu(0, fake=False, uuid="GPU-real"),)))
    assert w.execute() == "succeeded"
    (a,) = w.store.attempts(w.run.id, "train")
    assert (a.gpu_util_mean, a.gpu_util_max, a.gpu_memory_peak, a.gpu_memory_of) == (64.0, 64.0, 2 << 30, "device")
    assert len(made) == 1 and src.closed  # made once, closed when the run ends
    shown = run_json(w.store.run(w.run.id), w.store.steps(w.run.id), w.store.attempts(w.run.id))
    assert shown["steps"][0]["attempt_history"][0]["gpu_util_mean"] == 64.0
    (row,) = trace_rows(w.store.attempts(w.run.id))
    assert (row["gpu_util"], row["gpu_mem_peak"]) == (64.0, 2 << 30)


def test_a_cpu_step_is_never_sampled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def sampler() -> GpuSampler:
        raise AssertionError("no GPU attempt: no sampler")

    monkeypatch.setattr(usage_mod, "nvml_sampler", sampler)
    w = world(tmp_path, "a:\n  image: a\n")
    assert w.execute() == "succeeded"
    assert w.store.attempts(w.run.id)[0].gpu_util_mean is None
