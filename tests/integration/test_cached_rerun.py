"""A cached rerun of a fan-out and its gather, through the CLI with real containers: every
step is recorded succeeded from the cache (no attempt, the reason naming the first run),
its outputs in place; then a damaged entry runs its item, a new item runs, the rest stays
cached, and the gather, whose inputs changed, runs with every item's output."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write


def fanout(items: int) -> str:
    return f"""apiVersion: hetflow/v1
name: rerun
steps:
  work:
    image: {BUSYBOX}
    foreach: {{range: {items}}}
    command: [sh, -c, "echo item {{{{ item }}}} > /out/o.txt"]
    resources: {{cpus: 0.25, memory: 32Mi}}
    outputs: [o.txt]
  gather:
    image: {BUSYBOX}
    inputs: {{all: work/o.txt}}
    command: [sh, -c, "cat /in/all/*/o.txt > /out/all.txt"]
    resources: {{cpus: 0.25, memory: 32Mi}}
    outputs: [all.txt]
"""


def cached_from(step: dict[str, Any]) -> str | None:
    """The run a step's result was taken from (None: it ran)."""
    why = str(step["reason"])
    if step["attempts"] == 0 and why.startswith("cached: from run "):
        return why.split()[3]
    assert step["attempts"] == 1, step
    return None


def test_a_cached_rerun_then_a_damaged_entry_and_a_new_item(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", "-q", write(tmp_path, fanout(4)))
    first = hf.last_run()

    hf("run", "-q", write(tmp_path, fanout(4)))
    second = hf.last_run()

    steps = hf.show(second)["steps"]
    assert [(s["step"], s["state"], cached_from(s)) for s in steps] == [
        *((f"work.{i}", "succeeded", first) for i in range(4)),
        ("gather", "succeeded", first),
    ]
    assert (step_out(hf, second, "gather") / "all.txt").read_text() == "".join(f"item {i}\n" for i in range(4))
    assert (step_out(hf, second, "work.3") / "o.txt").read_text() == "item 3\n"

    item2 = step_out(hf, second, "work.2") / "o.txt"
    obj = next((hf.home / "cache" / "objects").rglob(hashlib.sha256(item2.read_bytes()).hexdigest()))
    obj.chmod(0o644)
    obj.write_text("item X\n")  # the entry of work.2 is damaged: its object changed
    hf("run", "-q", write(tmp_path, fanout(5)))
    third = hf.last_run()

    steps = hf.show(third)["steps"]
    assert [(s["step"], s["state"], cached_from(s)) for s in steps] == [
        ("work.0", "succeeded", first),
        ("work.1", "succeeded", first),
        ("work.2", "succeeded", None),  # damaged: ran again
        ("work.3", "succeeded", first),
        ("work.4", "succeeded", None),  # new
        ("gather", "succeeded", None),  # a new input
    ]
    assert (step_out(hf, third, "gather") / "all.txt").read_text() == "".join(f"item {i}\n" for i in range(5))
    with sqlite3.connect(f"file:{hf.home / 'state.db'}?mode=ro", uri=True) as db:
        notes = db.execute("SELECT step, message FROM events WHERE run_id = ? AND kind = 'cache'", (third,)).fetchall()
    assert [(step, message.endswith("was damaged; running")) for step, message in notes] == [("work.2", True)]
