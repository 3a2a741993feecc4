"""bench.local.checkpoint's figures as text: the table against resident memory, the work-saved
lines, and where the figures flatter."""

from __future__ import annotations

FLATTERS = (
    "Where these figures flatter:",
    "- the workload is one process with one anonymous mapping and one open file; a real step has more",
    "  mappings, threads and files for CRIU to walk (and a Python step a much larger resident set);",
    "- archives go to a local disk through the page cache (24 GiB here, no fsync) and each restore reads",
    "  an archive just written, so from memory: a cold read, or a copy to another node, is not included;",
    "- the memory is random data, which zstd cannot shrink (its row shows its CPU cost, not a saving);",
    "- part 2 holds a small resident set, so each dump is cheap; its checkpoints are far more frequent",
    "  (every few seconds) than a real schedule's, and the work lost depends on where the kill falls",
    "  between two checkpoints (at most one interval plus a dump);",
    "- plain podman commands: hetflow's own restore path (state store, runner) adds its own cost;",
    "- the containers run as the submitter, root here; a non-root --user dumps with hetflow's CRIU",
    "  patch (tools/criu-patches: limits from /proc/PID/limits) but is not measured here.",
)


def render(got: dict[str, object]) -> str:
    sizes = got["sizes"]
    work = got["work"]
    assert isinstance(sizes, list) and isinstance(work, dict)
    lines = [
        f"Checkpoint and restore against resident memory ({got['machine']})",
        "hetflow's container flags + --passwd=false; checkpoint --leave-running --export; restore --import",
        f"{'resident':>10} {'RSS MiB':>8} {'archive MiB':>12} {'compress':>9} {'checkpoint s':>13} "
        f"{'restore s':>10} {'reps':>5}  state kept",
    ]
    for r in sizes:
        lines.append(
            f"{r['mib']:>6} MiB {r['rss_mib']:>8.0f} {r['archive_mib']:>12.0f} {r['compress']:>9} "
            f"{r['checkpoint_s']:>13.2f} {r['restore_s']:>10.2f} {r['reps']:>5}  "
            f"{'yes' if r['kept_state'] else 'NO'}"
        )
    lines.append("(times are medians; state kept: the restored process went on from its dump, same seed and checksum)")
    lines += ["", *render_work(work), "", *FLATTERS]
    return "\n".join(lines)


def render_work(work: dict[str, object]) -> list[str]:
    runs = work["runs"]
    assert isinstance(runs, dict)
    plain, restart, restore = runs["plain"], runs["restart"], runs["restore"]
    tick = plain["wall_s"] / float(work["ticks"])  # type: ignore[arg-type]
    redone = (restore["ticks_at_kill"] - restore["ticks_resumed"]) * tick
    kill_at = float(work["kill_at"])  # type: ignore[arg-type]
    lines = [
        f"Work saved: {work['ticks']} ticks of CPU work (calibrated to ~{work['work_s']:g} s; "
        f"{work['mib']} MiB resident, --cpus 1), kill -9 at {kill_at:.0%}, checkpoint every {work['every_s']:g} s",
        f"{'run':<48} {'wall s':>7}  finished",
    ]
    for label, r in (
        ("no crash, no checkpoints (reference)", plain),
        ("crash, restart from zero (anchor)", restart),
        ("crash, restore from the last checkpoint", restore),
    ):
        done = "yes" if r["finished"] else f"NO: exit {r.get('exit_code', '?')} at tick {r.get('last_tick', '?')}"
        lines.append(f"{label:<48} {r['wall_s']:>7.1f}  {done}")
    rest = plain["wall_s"] - plain["kill_s"]  # the reference's time for the work after the kill point
    lines += [
        f"saved against the restart: {restart['wall_s'] - restore['wall_s']:.1f} s "
        f"(the restart redid {restart['ticks_at_kill'] * tick:.1f} s of work)",
        f"up to the kill at tick {restore['ticks_at_kill']}: reference {plain['kill_s']:.1f} s, "
        f"with {restore['checkpoints']} checkpoints {restore['kill_s']:.1f} s "
        f"(+{restore['kill_s'] - plain['kill_s']:.1f} s: their pauses, and the CPU their dumps and exports take "
        f"from the step on shared cores; the checkpoint commands took {restore['checkpoint_s']:.1f} s in all)",
        f"after the kill: reference {rest:.1f} s for the rest of the work; "
        f"restored {restore['wall_s'] - restore['kill_s']:.1f} s "
        f"(restore command {restore['restore_s']:.2f} s, work redone {redone:.1f} s: "
        f"{restore['ticks_at_kill']} -> {restore['ticks_resumed']} ticks); "
        f"restarted {restart['wall_s'] - restart['kill_s']:.1f} s (all {work['ticks']} ticks again)",
    ]
    return lines
