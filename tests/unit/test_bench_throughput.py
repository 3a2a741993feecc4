"""bench.local.throughput's table on made-up measurements (no containers): ratios, PASS/FAIL against
the issue's targets, and rows for the parts not measured yet; bench.peers.snakepeer's pure helpers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bench.local.throughput import Row, build_rows, optional, render, specs
from bench.peers.snakepeer import BUSYBOX, item_command, peak_overlap, retarget


def table(measured: Mapping[str, float | str]) -> dict[tuple[str, str], Row]:
    rows = build_rows(specs(40, 200, 2000, 50, 10000, 10000, 10000), measured)
    return {(r.workload, r.anchor.split(":")[0]): r for r in rows}


FAST: dict[str, float | str] = {
    "fanout.batched": 40.0,
    "fanout.hetflow": 800.0,
    "fanout.snakemake": 900.0,
    "fanout.chunked": 30.0,
    "wide.hetflow": 9.0,
    "wide.snakemake": 10.0,
    "wide.loop": 8.0,
    "chain.hetflow": 80.0,
    "chain.snakemake": 100.0,
    "chain.loop": 90.0,
    "batch.per_item_ms": 12.5,
    "batch.entry_ms": 8.0,
    "batch.alone_ms": 400.0,
    "plan.plan": 0.4,
    "plan.heft": 0.2,
    "plan.cli": 3.5,
    "cached.rerun": 4.0,
    "cached.dry": 2.0,
    "live.ps": 0.4,
    "live.show": 1.2,
    "slurm.sbatch": 100.0,
}


def test_each_target_passes_or_fails_on_its_own_ratio() -> None:
    rows = table(FAST)
    fan = "2,000 items + gather, batch 50"
    assert rows[(fan, "issue's 861 s (not this run)")].verdict == "PASS"  # 861 / 40 = 21.5x
    assert rows[(fan, "issue's 861 s (not this run)")].ratio == "0.05"
    assert rows[(fan, "hetflow unbatched")].verdict == "PASS"  # 20x
    assert rows[(fan, "Snakemake, 1 container/item")].verdict == "PASS"  # 22.5x >= 3x
    chunked = rows[(fan, "Snakemake, 50 items/container")]
    assert (chunked.verdict, chunked.ratio) == ("-", "1.33")  # information only: where batching flatters
    assert rows[("40 wide, no batching", "Snakemake")].verdict == "PASS"
    assert rows[("40 wide, no batching", "podman loop, same flags")].verdict == "FAIL"  # 9 s against 8 s
    assert rows[("40 wide, no batching", "podman loop, same flags")].ratio == "1.12"
    assert rows[("200 chain, no batching", "podman loop, same flags")].verdict == "PASS"
    assert rows[("per item, batched fan-out (wall/items)", "-")].verdict == "-"  # an upper bound: information
    assert rows[("per item inside a batch (its entry)", "a container each")].verdict == "PASS"
    assert rows[("plan 10,000 x 256, plan only", "plain HEFT")].verdict == "PASS"
    assert rows[("ps p95 during 2,000-item run", "-")].verdict == "PASS"
    assert rows[("show p95 during 2,000-item run", "-")].verdict == "FAIL"  # 1.2 s, not under 1 s
    assert rows[("plan 10,000 x 256, cold CLI", "-")].verdict == "FAIL"  # 3.5 s, not under 3 s
    assert rows[("cached rerun of 10,000 steps", "dry run of the file")].verdict == "PASS"
    assert rows[("Slurm, 10,000 small steps", "one sbatch per step")].verdict == "PASS"  # at most 100
    assert rows[("Slurm, 10,000 small steps", "one sbatch per step")].hetflow == "100 calls"


def test_a_fan_out_short_of_ten_times_today_fails() -> None:
    rows = table({**FAST, "fanout.batched": 100.0})  # 861 / 100 = 8.6x; 800 / 100 = 8x
    fan = "2,000 items + gather, batch 50"
    assert rows[(fan, "issue's 861 s (not this run)")].verdict == "FAIL"
    assert rows[(fan, "hetflow unbatched")].verdict == "FAIL"
    assert rows[(fan, "Snakemake, 1 container/item")].verdict == "PASS"  # 9x


def test_what_is_not_measured_says_why_and_neither_passes_nor_fails() -> None:
    missing = {k: v for k, v in FAST.items() if not k.startswith(("plan.", "fanout.batched", "batch."))}
    missing["cached.rerun"] = "not measured: no bench.local.cachedrerun.cached_rerun yet"
    rows = table(missing)
    row = rows[("cached rerun of 10,000 steps", "dry run of the file")]
    assert (row.hetflow, row.verdict) == ("not measured: no bench.local.cachedrerun.cached_rerun yet", "n/m")
    assert rows[("plan 10,000 x 256, plan only", "plain HEFT")].verdict == "n/m"
    assert rows[("2,000 items + gather, batch 50", "hetflow unbatched")].verdict == "n/m"
    assert rows[("40 wide, no batching", "Snakemake")].verdict == "PASS"  # the rest still judged


def test_a_missing_anchor_is_not_measured_rather_than_a_pass() -> None:
    rows = table({k: v for k, v in FAST.items() if k != "wide.snakemake"})
    assert rows[("40 wide, no batching", "Snakemake")].verdict == "n/m"


def test_quick_sizes_scale_the_issue_figure_and_the_table_renders_every_row() -> None:
    rows = build_rows(specs(4, 4, 20, 5, 500, 200, 500), FAST)
    assert rows[0].anchor == "issue's 861 s x 20/2000 (not this run): 8.61 s"
    text = render(rows)
    assert len(text.splitlines()) == len(rows) + 2
    assert text.splitlines()[0].startswith("| workload")


def test_peak_overlap_counts_steps_running_at_once() -> None:
    assert peak_overlap([(0, 2), (1, 3), (2, 4)]) == 2  # one ends as the next starts
    assert peak_overlap([(0, 10), (1, 2), (1, 3), (1, 4)]) == 4
    assert peak_overlap([]) == 0


def test_retarget_makes_item_k_from_item_0(tmp_path: Path) -> None:
    env = tmp_path / "kept.env"
    env.write_text("HETFLOW_STEP=work.0\nHOME=/tmp\n")
    argv = ["run", "-d", "--name", "hf-r1-work.0-1", "--label", "hetflow.step=work.0", "-v", "/h/work.0/1/out:/out"]
    argv += ["--env-file", str(env), BUSYBOX, *item_command(0)]
    made = retarget(argv, tmp_path, "work.7", item_command(7))
    assert made[:6] == ["run", "-d", "--name", "hf-r1-work.7-1", "--label", "hetflow.step=work.7"]
    assert made[6:8] == ["-v", "/h/work.7/1/out:/out"]
    assert Path(made[9]).read_text() == "HETFLOW_STEP=work.7\nHOME=/tmp\n"
    assert made[10:] == [BUSYBOX, "sh", "-c", "echo 7 > /out/o.txt"]


def test_a_part_not_written_yet_is_not_measured_and_one_that_exists_is_called() -> None:
    absent = optional("bench.no_such_part", "measure", lambda fn: {"k": 1.0}, ["k", "j"])
    assert absent == {"k": "not measured: no bench.no_such_part.measure yet", "j": absent["k"]}
    no_function = optional("bench.peers.snakepeer", "no_such_function", lambda fn: {"k": 1.0}, ["k"])
    assert no_function == {"k": "not measured: no bench.peers.snakepeer.no_such_function yet"}
    called = optional("bench.peers.snakepeer", "peak_overlap", lambda fn: {"k": float(fn([(0, 1), (0, 2)]))}, ["k"])  # type: ignore[arg-type]
    assert called == {"k": 2.0}
