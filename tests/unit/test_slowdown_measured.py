"""GPU-sharing slowdowns measured by tools/gpu-check reach the planner: `hetflow profile
slowdown FILE` records them, the fit is hetflow's learn_slowdown, and a cluster's
time-sliced classes of that GPU model use it unless their file sets a slowdown.
The file is the real one from the H100 run (docs/gpu-runs/2026-11-27-h100)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.cli.planning.slowdown import read_measurements
from hetflow.errors import UsageError
from hetflow.execute import measured_slowdowns
from hetflow.execute.submit.prepare import with_measured_slowdowns
from hetflow.inventory import GpuSharing
from hetflow.plan import MachineClass
from hetflow.state import Store

RUN = Path(__file__).resolve().parents[2] / "docs" / "gpu-runs" / "2026-11-27-h100" / "slowdown.json"
H100 = "NVIDIA H100 80GB HBM3"


def sliced(name: str, model: str, slowdown: float | None = None) -> MachineClass:
    sharing = GpuSharing(mode="time-slicing", replicas=4, slowdown=slowdown)
    return MachineClass(name=name, count=1, cores=8, memory=64 << 30, gpus=1, gpu_model=model, gpu_sharing=sharing)


def test_the_h100_measurement_is_used_for_its_model_where_the_file_sets_none(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.record_slowdowns(read_measurements(RUN, 1.0))
    assert measured_slowdowns(store) == {H100: pytest.approx(1.161, abs=0.001)}  # time-slicing only; MPS is shown
    classes = (sliced("h100", H100), sliced("h100-set", H100, 0.5), sliced("a100", "NVIDIA A100-SXM4-40GB"))
    got = [c.gpu_sharing.slowdown for c in with_measured_slowdowns(store, classes)]
    assert got == [pytest.approx(1.161, abs=0.001), 0.5, None]


def test_reading_a_file_again_counts_it_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.record_slowdowns(read_measurements(RUN, 1.0))
    store.record_slowdowns(read_measurements(RUN, 2.0))
    assert len(store.slowdowns()) == 4  # two loads x two modes


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("[1, 2]", "has 'gpu_model' and 'modes'"),
        ('{"gpu_model": "x", "modes": {"time-slicing": {"samples": [{"solo": 1}]}}}', "samples[0] needs numbers"),
        ('{"gpu_model": "x", "modes": {"mps": {"samples": [{"solo": 1, "shared": 2, "load": 1}]}}}', "load > 1"),
        ('{"gpu_model": "x", "modes": {"mps": {"error": "not there"}}}', "holds no measured samples"),
        ("{", "not a gpu-check slowdown.json"),
    ],
    ids=["not-an-object", "missing-number", "load-one", "no-samples", "not-json"],
)
def test_a_bad_file_is_named_with_what_to_change(tmp_path: Path, content: str, said: str) -> None:
    f = tmp_path / "slowdown.json"
    f.write_text(content)
    with pytest.raises(UsageError, match=r"slowdown\.json") as caught:
        read_measurements(f, 0.0)
    assert said in str(caught.value)


def test_the_cli_records_and_shows_it(tmp_path: Path) -> None:
    env = {"HETFLOW_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "hetflow.cli.main", "profile", "slowdown"]
    r = subprocess.run([*cmd, str(RUN), "--json"], capture_output=True, text=True, env=env, check=True)
    shown = json.loads(r.stdout)
    assert "recorded 4 samples" in r.stderr
    assert [(m["mode"], round(m["slowdown"], 3), m["used_by_planner"]) for m in shown["measured"]] == [
        ("mps", 0.969, False),
        ("time-slicing", 1.161, True),
    ]
    bad = subprocess.run([*cmd, str(tmp_path / "none.json")], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr
