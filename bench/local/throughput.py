"""Issue 26's targets in one table, every anchor measured in the same run on this machine.

    python -m bench.local.throughput [--wide 40] [--chain 200] [--items 2000] [--repeat 3]
                               [--repeat-fanout 1] [--batch 50] [--quick]

Rows (medians of the repeats; ratio = hetflow / anchor, lower is better):

* 2,000 trivial items + gather, with ``batch:`` on the fan-out step, against the issue's 861 s,
  against hetflow without batching in this run, against Snakemake with one container per
  item (``bench.peers.snakepeer``: the same ``podman run`` argv per item), and, for information,
  against Snakemake with a hand-written rule that runs B items per container (where
  batching flatters when set only against one container per item);
* 40 wide and a 200-step chain without batching, against Snakemake and against the
  same-flags ``podman run`` loop (``bench.local.overhead``'s replay of hetflow's own argv);
* per item inside a batch: the batched fan-out's wall time per item (an upper bound: it
  includes start-up, planning and the gather);
* parts other modules measure, each called if it exists and otherwise shown as
  "not measured: ..." (the contracts, so they can be dropped in):
  ``bench.planning.planscale.measure`` (plan only against plain HEFT on the same instance, cold CLI),
  ``bench.local.batchitem.per_item`` (an item's cost inside a batch, from its entry's marks),
  ``bench.local.cachedrerun.cached_rerun`` (a fully cached rerun against the file's dry run),
  ``bench.engines.slurmpack.sbatch_calls`` (Slurm's own count of a run's jobs on the local cluster),
  ``bench.local.scale.measure`` (ps/show p95 as processes while the fan-out runs).

The batched rows run only when this hetflow accepts ``batch:`` on a step (checked with a
dry run); otherwise they say so.  ``--quick`` uses small sizes (a smoke test: its figures
mean nothing against the targets).  Timings are wall-clock on a 2-core machine that others
may be using: read every ratio against its anchor from the same run, never across runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.local.overhead import hetflow_cmd
from bench.peers import snakepeer
from bench.speedrow import Row as SpeedRow
from bench.speedrow import emit

ISSUE_FANOUT_S = 861.0  # bench.local.scale's 2,000 items + gather before issue 26 (the issue's figure)
ISSUE_ITEMS = 2000

Value = float | str  # a median, or "not measured: why"
SKIPPABLE = [f"{w}.{t}" for w in ("wide", "chain") for t in ("hetflow", "snakemake", "loop")] + [
    f"fanout.{t}" for t in ("hetflow", "snakemake", "chunked", "batched")
]


@dataclass(frozen=True)
class Target:
    """``faster``: anchor / hetflow >= x; ``under``: hetflow < x; ``at_most``: hetflow <= x;
    ``info``: no target (shown for what it tells)."""

    kind: str
    x: float = 0.0

    def text(self, unit: str = "") -> str:
        if self.kind == "faster":
            return "not slower" if self.x == 1 else f">= {self.x:g}x faster"
        if self.kind == "under":
            return f"< {self.x:g} {unit}"
        if self.kind == "at_most":
            return f"<= {self.x:g} {unit}"
        return "(info)"

    def met(self, hetflow: float, anchor: float | None) -> bool | None:
        if self.kind == "faster":
            return anchor is not None and hetflow > 0 and anchor / hetflow >= self.x
        if self.kind == "under":
            return hetflow < self.x
        if self.kind == "at_most":
            return hetflow <= self.x
        return None


@dataclass(frozen=True)
class Spec:
    workload: str
    anchor_name: str
    anchor: str | float | None  # a key of the measurements, a fixed figure, or none
    hetflow: str  # a key of the measurements
    target: Target
    unit: str = "s"


@dataclass(frozen=True)
class Row:
    workload: str
    anchor: str
    hetflow: str
    ratio: str
    target: str
    verdict: str  # PASS, FAIL, "-" (info) or "n/m" (not measured)


def specs(wide: int, chain: int, items: int, batch: int, plan: int, cached: int, slurm: int) -> list[Spec]:
    fan = f"{items:,} items + gather, batch {batch}"
    scaled = ISSUE_FANOUT_S * items / ISSUE_ITEMS
    issue = "issue's 861 s" + ("" if items == ISSUE_ITEMS else f" x {items}/{ISSUE_ITEMS}") + " (not this run)"
    return [
        Spec(fan, issue, scaled, "fanout.batched", Target("faster", 10)),
        Spec(fan, "hetflow unbatched", "fanout.hetflow", "fanout.batched", Target("faster", 10)),
        Spec(fan, "Snakemake, 1 container/item", "fanout.snakemake", "fanout.batched", Target("faster", 3)),
        Spec(fan, f"Snakemake, {batch} items/container", "fanout.chunked", "fanout.batched", Target("info")),
        Spec(
            f"{items:,} items + gather, unbatched",
            "Snakemake, 1 container/item",
            "fanout.snakemake",
            "fanout.hetflow",
            Target("info"),
        ),
        Spec(f"{wide} wide, no batching", "Snakemake", "wide.snakemake", "wide.hetflow", Target("faster", 1)),
        Spec(f"{wide} wide, no batching", "podman loop, same flags", "wide.loop", "wide.hetflow", Target("faster", 1)),
        Spec(f"{chain} chain, no batching", "Snakemake", "chain.snakemake", "chain.hetflow", Target("faster", 1)),
        Spec(
            f"{chain} chain, no batching", "podman loop, same flags", "chain.loop", "chain.hetflow", Target("faster", 1)
        ),
        Spec("per item, batched fan-out (wall/items)", "-", None, "batch.per_item_ms", Target("info"), "ms"),
        Spec(
            "per item inside a batch (its entry)",
            "a container each",
            "batch.alone_ms",
            "batch.entry_ms",
            Target("under", 20),
            "ms",
        ),
        Spec(f"plan {plan:,} x 256, plan only", "plain HEFT", "plan.heft", "plan.plan", Target("under", 1)),
        Spec(f"plan {plan:,} x 256, cold CLI", "-", None, "plan.cli", Target("under", 3)),
        Spec(
            f"cached rerun of {cached:,} steps", "dry run of the file", "cached.dry", "cached.rerun", Target("under", 5)
        ),
        Spec(f"ps p95 during {items:,}-item run", "-", None, "live.ps", Target("under", 1)),
        Spec(f"show p95 during {items:,}-item run", "-", None, "live.show", Target("under", 1)),
        Spec(
            f"Slurm, {slurm:,} small steps",
            "one sbatch per step",
            float(slurm),
            "slurm.sbatch",
            Target("at_most", 100),
            "calls",
        ),
    ]


def fmt(value: float, unit: str) -> str:
    if unit == "calls":
        return f"{value:.0f} calls"
    if unit == "ms":
        return f"{value:.1f} ms"
    return f"{value:.2f} s"


def build_rows(specs_: list[Spec], measured: Mapping[str, Value]) -> list[Row]:
    """The table from measurements (medians, or "not measured: ..." strings); no I/O."""
    rows = []
    for s in specs_:
        got = measured.get(s.hetflow, "not measured: no figure")
        anchor: Value | None = s.anchor
        if isinstance(s.anchor, str):
            anchor = measured.get(s.anchor, "not measured: no figure")
        anchor_text = "-" if anchor is None else anchor if isinstance(anchor, str) else fmt(anchor, s.unit)
        anchor_label = s.anchor_name if anchor is None else f"{s.anchor_name}: {anchor_text}"
        if isinstance(got, str) or (isinstance(anchor, str) and s.target.kind in ("faster", "info")):
            why = got if isinstance(got, str) else str(anchor)
            rows.append(
                Row(
                    s.workload,
                    anchor_label,
                    why if isinstance(got, str) else fmt(got, s.unit),
                    "-",
                    s.target.text(s.unit),
                    "n/m" if s.target.kind != "info" else "-",
                )
            )
            continue
        base = anchor if isinstance(anchor, float | int) else None
        ratio = f"{got / base:.2f}" if base else "-"
        ok = s.target.met(got, base)
        verdict = "-" if ok is None else "PASS" if ok else "FAIL"
        rows.append(Row(s.workload, anchor_label, fmt(got, s.unit), ratio, s.target.text(s.unit), verdict))
    return rows


def render(rows: list[Row]) -> str:
    head = ("workload", "anchor (this run)", "hetflow", "ratio", "target", "result")
    cells = [head, *[(r.workload, r.anchor, r.hetflow, r.ratio, r.target, r.verdict) for r in rows]]
    widths = [max(len(c[k]) for c in cells) for k in range(len(head))]
    lines = ["| " + " | ".join(c[k].ljust(widths[k]) for k in range(len(head))) + " |" for c in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


# --- measuring ------------------------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def measure_dag(kind: str, n: int, repeat: int, home: Path, out: dict[str, Value]) -> None:
    """hetflow, Snakemake and the same-flags loop on ``wide`` or ``chain``, interleaved."""
    (peer,) = snakepeer.prepare(kind, n, home)
    times: dict[str, list[float]] = {"hetflow": [], "snakemake": [], "loop": []}
    peaks = []
    for r in range(repeat):
        took, peak = snakepeer.run_hetflow(peer.workflow, home / f"h{r}")
        times["hetflow"].append(took)
        peaks.append(peak)
        times["snakemake"].append(snakepeer.run_snakemake(peer, home / f"smk{r}"))
        times["loop"].append(snakepeer.run_loop(peer))
    snakepeer.cleanup([peer])
    for k, ts in times.items():
        out[f"{kind}.{k}"] = median(ts)
    print(
        f"{kind} {n}: Snakemake --cores {peer.at_once}, the loop {'in order' if kind == 'chain' else peer.at_once}"
        f"{'' if kind == 'chain' else ' at a time'}; hetflow ran at most {max(peaks)} at once; runs (s): "
        + ", ".join(f"{k} {' '.join(f'{t:.1f}' for t in ts)}" for k, ts in times.items()),
        flush=True,
    )


def batch_supported(home: Path) -> str:
    """ "" when this hetflow takes ``batch:`` on a step, else why not (its own message)."""
    wf = home / "batch-probe.yaml"
    wf.parent.mkdir(parents=True, exist_ok=True)
    wf.write_text(snakepeer.fanout_workflow(2, batch=2))
    env = {**os.environ, "HETFLOW_HOME": str(home / "probe")}
    proc = subprocess.run(hetflow_cmd("run", "--dry-run", str(wf)), env=env, capture_output=True, text=True)
    if proc.returncode == 0:
        return ""
    text = (proc.stderr or proc.stdout).replace(f"{wf}:", "")
    said = [ln.split(";")[0].split("error:")[-1].strip() for ln in text.splitlines() if "batch" in ln]
    return f"not measured: this hetflow refuses batch: ({said[0][:70] if said else proc.returncode})"


def measure_fanout(n: int, repeat: int, batch: int, home: Path, out: dict[str, Value], one_each: bool = True) -> None:
    per_item, chunked = snakepeer.prepare("fanout", n, home, chunk=batch)
    refused = batch_supported(home)
    batched_wf = home / "fanout-batched.yaml"
    batched_wf.write_text(snakepeer.fanout_workflow(n, batch=batch))
    times: dict[str, list[float]] = {"hetflow": [], "snakemake": [], "chunked": [], "batched": []}
    peaks = []
    for r in range(repeat):
        if not refused:
            times["batched"].append(snakepeer.run_hetflow(batched_wf, home / f"hb{r}")[0])
        times["chunked"].append(snakepeer.run_snakemake(chunked, home / f"smk-chunked{r}"))
        if not one_each:
            continue
        took, peak = snakepeer.run_hetflow(per_item.workflow, home / f"h{r}")
        times["hetflow"].append(took)
        peaks.append(peak)
        times["snakemake"].append(snakepeer.run_snakemake(per_item, home / f"smk{r}"))
    snakepeer.cleanup([per_item, chunked])
    for k, ts in times.items():
        out[f"fanout.{k}"] = median(ts) if ts else (refused or "not measured: --only-batched")
    if times["batched"] and times["chunked"]:
        target = f"{n} items, batch: {batch}, no slower than Snakemake's hand-packed rule"
        mine, theirs = median(times["batched"]), median(times["chunked"])
        emit(
            SpeedRow(
                target, mine / theirs, "x", "Snakemake, B items a container (s)", theirs, 1.0, "bench.local.throughput"
            )
        )
    out["batch.per_item_ms"] = 1000 * median(times["batched"]) / n if times["batched"] else refused
    print(
        f"fan-out {n}: Snakemake --cores {per_item.at_once}; hetflow ran at most {max(peaks, default=0)} at once;"
        " runs (s): " + ", ".join(f"{k} {' '.join(f'{t:.1f}' for t in ts)}" for k, ts in times.items()),
        flush=True,
    )


def optional(
    module: str, function: str, call: Callable[[Callable[..., object]], dict[str, Value]], keys: list[str]
) -> dict[str, Value]:
    """``module.function`` through ``call``, or every key "not measured" when it is not there yet."""
    try:
        fn = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError):
        return dict.fromkeys(keys, f"not measured: no {module}.{function} yet")
    return call(fn)


def measure_others(plan: int, cached: int, slurm: int, scale_items: int) -> dict[str, Value]:
    out: dict[str, Value] = {}

    def planning(fn: Callable[..., object]) -> dict[str, Value]:
        got = fn(plan, rounds=3)
        assert isinstance(got, dict)
        gen = got["plan"]["generated"]
        return {"plan.plan": gen["hetflow_s"], "plan.heft": gen["heft_s"], "plan.cli": got["cli"]["plan_cold_s"]}

    out |= optional("bench.planning.planscale", "measure", planning, ["plan.plan", "plan.heft", "plan.cli"])

    def per_item(fn: Callable[..., object]) -> dict[str, Value]:
        got = fn(200)
        assert isinstance(got, dict)
        return {"batch.entry_ms": 1000 * got["per_item_in_batch_s"], "batch.alone_ms": 1000 * got["alone_per_item_s"]}

    out |= optional("bench.local.batchitem", "per_item", per_item, ["batch.entry_ms", "batch.alone_ms"])

    def rerun(fn: Callable[..., object]) -> dict[str, Value]:
        got = fn(cached)
        assert isinstance(got, dict)
        return {"cached.rerun": float(got["rerun_s"]), "cached.dry": float(got["dry_run_s"])}

    out |= optional("bench.local.cachedrerun", "cached_rerun", rerun, ["cached.rerun", "cached.dry"])

    def sbatch(fn: Callable[..., object]) -> dict[str, Value]:
        got = fn(slurm)
        assert isinstance(got, dict)
        return {"slurm.sbatch": float(got["sbatch_calls"])}

    out |= optional("bench.engines.slurmpack", "sbatch_calls", sbatch, ["slurm.sbatch"])

    def saturated(fn: Callable[..., object]) -> dict[str, Value]:
        got = fn(scale_items, 1.0)
        assert isinstance(got, dict)
        return {"live.ps": got["ps_p95_s"], "live.show": got["show_p95_s"]}

    out |= optional("bench.local.scale", "measure", saturated, ["live.ps", "live.show"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wide", type=int, default=40)
    ap.add_argument("--chain", type=int, default=200)
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the wide workflow (median)")
    ap.add_argument("--repeat-chain", type=int, default=3, help="runs of the chain (median)")
    ap.add_argument("--repeat-fanout", type=int, default=1, help="runs of the fan-out (median)")
    ap.add_argument("--batch", type=int, default=50, help="items per container: hetflow batch: and Snakemake chunks")
    ap.add_argument("--plan-steps", type=int, default=10000)
    ap.add_argument("--cached-steps", type=int, default=10000)
    ap.add_argument("--slurm-steps", type=int, default=10000)
    ap.add_argument("--skip", action="append", default=[], choices=["wide", "chain", "fanout", "others"])
    ap.add_argument("--quick", action="store_true", help="small sizes, one run each: a smoke test")
    ap.add_argument(
        "--only-batched",
        action="store_true",
        help="only the batched fan-out and Snakemake's hand-packed rule (bench.speed's row)",
    )
    args = ap.parse_args()
    if args.only_batched:
        args.skip += ["wide", "chain", "others"]
    if args.quick:
        args.wide, args.chain, args.items, args.batch = 4, 4, 20, 5
        args.repeat = args.repeat_chain = args.repeat_fanout = 1
        args.plan_steps, args.cached_steps, args.slurm_steps = 500, 200, 500
    for name in ("wide", "chain", "items", "repeat", "repeat_chain", "repeat_fanout", "batch"):
        if getattr(args, name) < 1:
            sys.exit(f"bench: --{name.replace('_', '-')} must be at least 1 (got {getattr(args, name)})")
    skipped = "not measured: skipped (--skip)"
    measured: dict[str, Value] = {k: skipped for k in SKIPPABLE if k.split(".")[0] in args.skip}
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} (shared: read ratios, not times)")
    with tempfile.TemporaryDirectory(prefix="hetflow-bench-throughput-") as tmp:
        if "wide" not in args.skip:
            measure_dag("wide", args.wide, args.repeat, Path(tmp) / "wide", measured)
        if "chain" not in args.skip:
            measure_dag("chain", args.chain, args.repeat_chain, Path(tmp) / "chain", measured)
        if "fanout" not in args.skip:
            fanout = Path(tmp) / "fanout"
            measure_fanout(args.items, args.repeat_fanout, args.batch, fanout, measured, not args.only_batched)
    if "others" not in args.skip:
        measured |= measure_others(args.plan_steps, args.cached_steps, args.slurm_steps, args.items)
    table = specs(args.wide, args.chain, args.items, args.batch, args.plan_steps, args.cached_steps, args.slurm_steps)
    print(render(build_rows(table, measured)))


if __name__ == "__main__":
    main()
