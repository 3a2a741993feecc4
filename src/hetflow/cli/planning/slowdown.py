"""`hetflow profile slowdown`: GPU-sharing slowdowns measured by tools/gpu-check, which the
planner then uses for that GPU model where a cluster file sets none."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from hetflow.cli.common import console, err, open_store, print_json
from hetflow.errors import UsageError
from hetflow.inventory import DEFAULT_TIMESLICE_SLOWDOWN
from hetflow.state import SlowdownSample

MODES = ("time-slicing", "mps")


def read_measurements(path: Path, now: float) -> list[SlowdownSample]:
    """The samples of a gpu-check ``slowdown.json`` (its ``modes.MODE.samples``)."""
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; give the slowdown.json a gpu-check run wrote") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a gpu-check slowdown.json: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("modes"), dict) or not data.get("gpu_model"):
        raise UsageError(f"{path}: not a gpu-check slowdown.json (it has 'gpu_model' and 'modes')")
    out = []
    for mode, found in data["modes"].items():
        if mode not in MODES or not isinstance(found, dict):
            continue
        for i, s in enumerate(found.get("samples") or []):
            try:
                solo, shared, load = float(s["solo"]), float(s["shared"]), float(s["load"])
            except (KeyError, TypeError, ValueError):
                raise UsageError(f"{path}: modes.{mode}.samples[{i}] needs numbers solo, shared and load") from None
            if solo <= 0 or shared <= 0 or load <= 1:
                raise UsageError(f"{path}: modes.{mode}.samples[{i}]: solo and shared > 0 and load > 1, not {s}")
            out.append(SlowdownSample(str(data["gpu_model"]), mode, solo, shared, load, str(path.resolve()), now))
    if not out:
        raise UsageError(f"{path}: holds no measured samples (its sharing part did not run)")
    return out


def profile_slowdown(
    files: list[Path] = typer.Argument(None, help="slowdown.json files of tools/gpu-check runs to record first."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """GPU-sharing slowdowns measured on real GPUs (tools/gpu-check): s in solo x (1 + s x (load - 1)),
    fitted per GPU model; `hetflow plan` and `run --cluster` use it for that model's time-sliced
    GPUs where the cluster file sets no slowdown."""
    from hetflow.execute import measured_slowdowns
    from hetflow.plan import SharedSample, learn_slowdown

    store = open_store()
    now = time.time()
    for f in files or []:
        samples = read_measurements(f, now)
        store.record_slowdowns(samples)
        err.print(f"recorded {len(samples)} samples from {f}")  # stderr: --json stays parseable
    used = measured_slowdowns(store)
    rows: dict[tuple[str, str], list[SlowdownSample]] = {}
    for s in store.slowdowns():
        rows.setdefault((s.gpu_model, s.mode), []).append(s)
    table: list[dict[str, Any]] = []
    for (model, mode), ss in sorted(rows.items()):
        fitted = learn_slowdown([SharedSample(s.solo, s.shared, s.load) for s in ss])
        table.append(
            {
                "gpu_model": model,
                "mode": mode,
                "slowdown": fitted,
                "samples": len(ss),
                "sources": sorted({s.source for s in ss}),
                "used_by_planner": mode == "time-slicing" and model in used,
            }
        )
    if json_out:
        print_json({"default": DEFAULT_TIMESLICE_SLOWDOWN, "measured": table})
        return
    if not table:
        console.print(f"nothing measured yet: the model's default is s = {DEFAULT_TIMESLICE_SLOWDOWN}")
        console.print("record a run of tools/gpu-check: hetflow profile slowdown OUTDIR/slowdown.json")
        return
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for col in ("GPU MODEL", "MODE", "SLOWDOWN", "SAMPLES", "PLANNER"):
        t.add_column(col)
    for r in table:
        fit = "-" if r["slowdown"] is None else f"{r['slowdown']:.3f}"
        use = "uses it" if r["used_by_planner"] else "shown only"
        t.add_row(str(r["gpu_model"]), str(r["mode"]), fit, str(r["samples"]), use)
    console.print(t)
    console.print(
        f"the model's default: s = {DEFAULT_TIMESLICE_SLOWDOWN} (a cluster file's gpus.sharing.slowdown wins)"
    )
