"""Failure-aware retries in real containers: an out-of-memory kill retried with more memory,
a GPU variant failing at run time retried on the CPU variant, and variants forced or
preferred from the command line (fake GPUs make the GPU variant selectable here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.state import Store
from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

# dd allocates its block whole: 150 MiB under a 64 MiB limit is killed by the OOM killer
# (exit 137) every time, and fits under 256 MiB.
OOM = f"""
apiVersion: hetflow/v1
name: hungry
steps:
  hog:
    image: {BUSYBOX}
    resources: {{memory: 64Mi}}
    retry: {{count: 1, memory: x4}}
    command: [sh, -c, "dd if=/dev/zero of=/dev/null bs=150M count=1 && echo fed > /out/ok"]
    outputs: [ok]
"""


def test_an_oom_killed_step_is_retried_with_more_memory_and_says_so(hf: Hetflow, tmp_path: Path) -> None:
    litter = Path.cwd() / "oom"  # conmon writes this into its working directory on an OOM kill
    litter.unlink(missing_ok=True)
    proc = hf("run", "--no-cache", write(tmp_path, OOM))
    assert not litter.exists()  # the engine runs in the attempt's folder, not where hetflow was started
    said = "memory 64Mi -> 256Mi after an out-of-memory kill (exit 137)"
    assert said in proc.stdout  # the progress line of the failed attempt
    data = hf.show(hf.last_run())
    step = data["steps"][0]
    assert step["state"] == "succeeded" and step["attempts"] == 2
    history = step["attempt_history"]
    assert [a["exit_code"] for a in history] == [137, 0]
    assert [a["memory"] for a in history] == [64 << 20, 256 << 20]  # what each attempt asked
    assert history[1]["message"] == f"retry: {said}"  # the attempt says what changed for it
    assert said in step["reason"]  # the WHY column of `hetflow show`
    assert (step_out(hf, data["id"], "hog") / "ok").read_text() == "fed\n"
    store = Store(hf.home / "state.db", read_only=True)
    assert any(f"next attempt: {said}" in e.message for e in store.events(data["id"]) if e.step == "hog")
    # what each attempt asked, as the attempts table records it
    assert [a.memory for a in store.attempts(data["id"], "hog")] == [64 << 20, 256 << 20]


FALLBACK = f"""
apiVersion: hetflow/v1
name: fallback
steps:
  train:
    variants:
      gpu: {{image: {BUSYBOX}, command: [sh, -c, "echo no CUDA here; exit 3"], resources: {{gpus: 1}}}}
      cpu: {{image: {BUSYBOX}, command: [sh, -c, "echo cpu > /out/model"]}}
    retry: {{count: 1, fallback: [cpu]}}
    outputs: [model]
"""


def test_a_gpu_variant_failing_at_run_time_is_retried_on_the_cpu_variant(hf: Hetflow, tmp_path: Path) -> None:
    hf(
        "run",
        "--no-cache",
        write(tmp_path, FALLBACK),
        "--variant",
        "train=gpu",
        extra_env={"HETFLOW_FAKE_GPUS": "a100:1"},
    )
    data = hf.show(hf.last_run())
    step = data["steps"][0]
    assert step["state"] == "succeeded"
    history = step["attempt_history"]
    assert [(a["variant"], a["exit_code"], a["gpus"]) for a in history] == [("gpu", 3, [0]), ("cpu", 0, [])]
    assert "variant gpu -> cpu after exit 3" in step["reason"]
    assert history[1]["message"] == "retry: variant gpu -> cpu after exit 3"
    assert (step_out(hf, data["id"], "train") / "model").read_text() == "cpu\n"


PICK = f"""
apiVersion: hetflow/v1
name: pick
steps:
  train:
    variants:
      gpu: {{image: {BUSYBOX}, command: [sh, -c, "echo gpu > /out/v"], resources: {{gpus: 1}}}}
      cpu: {{image: {BUSYBOX}, command: [sh, -c, "echo cpu > /out/v"]}}
    outputs: [v]
"""


@pytest.mark.parametrize(
    ("args", "variant", "why"),
    [
        (["--variant", "train=cpu"], "cpu", "forced by --variant train=cpu"),
        (["--variant", "train=gpu"], "gpu", "forced by --variant train=gpu"),
        (["--prefer", "cpu"], "cpu", "preferred by --prefer cpu"),
        (["--prefer", "gpu"], "gpu", "preferred by --prefer gpu"),
    ],
    ids=["force-cpu", "force-gpu", "prefer-cpu", "prefer-gpu"],
)
def test_variant_forced_or_preferred_from_the_command_line(
    hf: Hetflow, tmp_path: Path, args: list[str], variant: str, why: str
) -> None:
    hf("run", "--no-cache", write(tmp_path, PICK), *args, extra_env={"HETFLOW_FAKE_GPUS": "a100:1"})
    step = hf.show(hf.last_run())["steps"][0]
    assert (step["variant"], step["state"]) == (variant, "succeeded")
    assert why in step["reason"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "trian=cpu"], "has no step 'trian' (did you mean 'train'?); its steps: train"),
        (["--variant", "train=tpu"], "step 'train' has no variant 'tpu' (did you mean 'gpu'?); its variants: gpu, cpu"),
        (["--variant", "train"], "--variant 'train': write STEP=VARIANT"),
        (["--prefer", "fpga"], "--prefer 'fpga': use gpu or cpu"),
    ],
    ids=["unknown-step", "unknown-variant", "no-equals", "bad-prefer"],
)
def test_bad_variant_choices_exit_2_naming_the_choices(
    hf: Hetflow, tmp_path: Path, args: list[str], message: str
) -> None:
    proc = hf("run", write(tmp_path, PICK), *args, check=False, extra_env={"HETFLOW_FAKE_GPUS": "a100:1"})
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert hf("ps", "--all", "--json").stdout.strip() == "[]"  # nothing was recorded


@pytest.mark.parametrize(
    ("args", "variant", "why"),
    [
        (["--prefer", "cpu"], "cpu", "preferred by --prefer cpu"),
        (["--variant", "train=gpu"], "gpu", "forced by --variant train=gpu"),
    ],
    ids=["prefer-cpu", "force-gpu"],
)
def test_plan_explain_says_a_variant_was_forced_or_preferred(
    hf: Hetflow, tmp_path: Path, args: list[str], variant: str, why: str
) -> None:
    cluster = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "hetero-16.yaml"
    out = hf("plan", write(tmp_path, PICK), "--cluster", str(cluster), "--explain", *args).stdout
    assert f"train: {variant} on " in out
    assert f"variant  {variant}: {why}" in out
