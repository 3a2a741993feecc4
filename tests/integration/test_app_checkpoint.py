"""Application checkpoints with real podman (issue 27): the example's training loop saves
to $HETFLOW_CHECKPOINT_DIR when asked (SIGUSR1, ``every``) and on SIGTERM (``hetflow stop``),
and ``hetflow resume`` continues from its last iteration, not from zero, to the result an
uninterrupted run gives; each step is stopped with its own ``stop_grace``."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from demo.images import build_examples

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE = EXAMPLES / "checkpoint"
ITERATIONS = 1500


@pytest.fixture(scope="module")
def numpy_image() -> str:
    # Built once per machine and cached (about 75 s the first time); a failure here fails.
    return build_examples(EXAMPLES, gpu=False, mpi=False, log=lambda _: None)[1]


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _attempts(hf: Hetflow, run_id: str, step: str) -> list[dict[str, Any]]:
    [s] = [s for s in hf.show(run_id)["steps"] if s["step"] == step]
    return list(s["attempt_history"])


def _uninterrupted(tmp_path: Path, args: list[str]) -> dict[str, Any]:
    """The example's training run start to end on this host, with no signal: the reference."""
    spec = importlib.util.spec_from_file_location("hf_example_train", EXAMPLE / "app" / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    folder = tmp_path / "reference"
    folder.mkdir()
    out = folder / "result.json"
    assert train.train(train.parse([*args, "--out", str(out)]), folder) == 0
    return dict(json.loads(out.read_text()))


def test_the_example_saves_on_sigterm_and_resumes_from_its_checkpoint(
    hf: Hetflow, tmp_path: Path, numpy_image: str
) -> None:
    # the example as it is, but asked to save every second, and its scripts found from here
    text = (EXAMPLE / "workflow.yaml").read_text()
    text = text.replace("\n  app: app\n", f"\n  app: {EXAMPLE / 'app'}\n").replace("every: 10s", "every: 1s")
    assert "every: 1s" in text and str(EXAMPLE / "app") in text
    params = {"iterations": ITERATIONS, "save_every": 50, "pause": 0.005, "seed": 3}
    hf("run", "-d", write(tmp_path, text), *(a for k, v in params.items() for a in ("-p", f"{k}={v}")))
    run_id = hf.last_run()
    workdir = Path(hf.show(run_id)["workdir"])
    first = workdir / "logs" / "train.1.log"
    hf.wait_for(lambda: "(SIGUSR1)" in _text(first), timeout=120)  # hetflow asked it to save: every 1s

    hf("stop", run_id)

    stopped = re.search(r"SIGTERM: saved iteration (\d+); exiting 143", _text(first))
    assert stopped is not None, _text(first)
    saved = int(stopped.group(1))
    assert 0 < saved < ITERATIONS
    assert (workdir / "checkpoints" / "train" / "app" / "last.npz").is_file()
    assert [(a["state"], a["exit_code"]) for a in _attempts(hf, run_id, "train")] == [("stopped", 143)]

    hf("resume", run_id, timeout=300)

    assert hf.show(run_id)["state"] == "succeeded"
    second = _text(workdir / "logs" / "train.2.log")
    assert f"resumed from iteration {saved} " in second and "starting from iteration 0" not in second
    result = json.loads((step_out(hf, run_id, "train") / "result.json").read_text())
    args = ["--iterations", str(ITERATIONS), "--save-every", "50", "--seed", "3"]
    reference = _uninterrupted(tmp_path, args)
    assert result["iterations"] == ITERATIONS and result["accuracy"] > 0.9
    # the RNG state is part of the checkpoint: stopped and resumed computes what one run does
    assert result["weights"] == pytest.approx(reference["weights"], rel=1e-9, abs=1e-12)


GRACES = f"""apiVersion: hetflow/v1
name: graces
steps:
  quick:
    image: {BUSYBOX}
    stop_grace: 30s
    command: [sh, -c, "trap 'echo saving; exit 143' TERM; echo started; sleep 60 & wait"]
  slow:
    image: {BUSYBOX}
    stop_grace: 1s
    command: [sh, -c, "trap 'echo saving; sleep 8; echo saved; exit 143' TERM; echo started; sleep 60 & wait"]
"""


def test_each_step_is_stopped_with_its_own_grace(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", "-d", write(tmp_path, GRACES))
    run_id = hf.last_run()
    logs = Path(hf.show(run_id)["workdir"]) / "logs"
    hf.wait_for(lambda: all("started" in _text(logs / f"{s}.1.log") for s in ("quick", "slow")))

    hf("stop", run_id)

    # slow's 1 s ran out during its 8 s save (with podman's default 10 s it would have saved);
    # quick saved within its 30 s
    assert [a["exit_code"] for a in _attempts(hf, run_id, "slow")] == [137]
    assert "saving" in _text(logs / "slow.1.log") and "saved" not in _text(logs / "slow.1.log")
    assert [a["exit_code"] for a in _attempts(hf, run_id, "quick")] == [143]
    assert "saving" in _text(logs / "quick.1.log")
