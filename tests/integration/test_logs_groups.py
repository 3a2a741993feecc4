"""`hetflow logs RUN GROUP` in real containers: a fan-out's items, each line prefixed with the
item's name; a gang's ranks, each prefixed like torchrun's `[rank1]:`; `--rank N` picks one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.hfkit import BUSYBOX, Hetflow, write

WF = f"""
apiVersion: hetflow/v1
name: groups
steps:
  count:
    foreach: {{range: 3}}
    image: {BUSYBOX}
    command: [sh, -c, "echo item {{{{ index }}}} says hi; echo item {{{{ index }}}} warns >&2"]
    resources: {{cpus: 0.1, memory: 32Mi}}
  pair:
    image: {BUSYBOX}
    command: [sh, -c, "echo replica $HETFLOW_RANK of $HETFLOW_WORLD_SIZE"]
    resources: {{cpus: 0.1, memory: 32Mi}}
    gang: {{replicas: 2}}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, busybox: str) -> tuple[Hetflow, str]:
    """One run of both groups, shared by the tests below (they only read its logs)."""
    tmp_path = tmp_path_factory.mktemp("logs-groups")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HETFLOW_", "SUDO_"))}
    env.update(HETFLOW_HOME=str(tmp_path / "home"), HETFLOW_POLL_INTERVAL="0.1", COLUMNS="200")
    hf = Hetflow(tmp_path / "home", env)
    hf("run", "-q", write(tmp_path, WF))
    return hf, hf.last_run()


@pytest.mark.parametrize(
    ("args", "stdout", "stderr"),
    [
        (
            ["count"],
            # item and attempt apart (issue 42: "count.1" read as attempt 1 of count); a range's
            # value is its index, so only the index shows
            ["count[0] | item 0 says hi", "count[1] | item 1 says hi", "count[2] | item 2 says hi"],
            ["count[0] | item 0 warns", "count[1] | item 1 warns", "count[2] | item 2 warns"],
        ),
        (["count.1"], ["count[1] #1 | item 1 says hi"], ["count[1] #1 | item 1 warns"]),
        (["pair"], ["pair #1 | [rank0]: replica 0 of 2", "pair #1 | [rank1]: replica 1 of 2"], []),
        (["pair", "--rank", "1", "--attempt", "1"], ["replica 1 of 2"], []),
    ],
    ids=["fan-out", "one-item", "gang", "gang-rank"],
)
def test_logs_of_a_group_show_every_member_prefixed(
    run: tuple[Hetflow, str], args: list[str], stdout: list[str], stderr: list[str]
) -> None:
    hf, rid = run
    proc = hf("logs", rid, *args)
    assert proc.stdout.splitlines() == stdout
    assert proc.stderr.splitlines() == stderr


def test_a_name_that_is_neither_step_nor_fan_out_is_refused_with_the_groups_named(run: tuple[Hetflow, str]) -> None:
    hf, rid = run
    proc = hf("logs", rid, "cont", check=False)
    assert proc.returncode == 2
    assert f"run {rid} has no step 'cont' (did you mean 'count'?); its steps: count (count.0..2), pair" in proc.stderr


@pytest.mark.parametrize(
    ("typed", "offered"),
    [
        ("hetflow logs ", lambda rid: [rid]),
        ("hetflow logs RID c", lambda rid: ["count", "count.0", "count.1", "count.2"]),
        ("hetflow logs nosuchrun ", lambda rid: []),
    ],
    ids=["run-ids", "steps-and-groups", "unknown-run"],
)
def test_tab_offers_the_runs_and_their_steps_and_groups(run: tuple[Hetflow, str], typed: str, offered: Any) -> None:
    hf, rid = run
    words = typed.replace("RID", rid)
    env = {
        "_HETFLOW_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    proc = hf(extra_env=env)
    assert proc.stdout.split() == offered(rid)
    assert proc.stderr == ""


PENDING = f"""
apiVersion: hetflow/v1
name: later
steps:
  names:
    image: {BUSYBOX}
    command: [sh, -c, "sleep 3; printf 'a\\\\nb\\\\n' > /out/names.txt"]
    outputs: [names.txt]
  greet:
    foreach: {{lines: names/names.txt}}
    image: {BUSYBOX}
    command: [echo, "hello {{{{ item }}}}"]
"""


def test_following_a_fan_out_before_its_list_is_known_shows_its_items(hf: Hetflow, tmp_path: Path) -> None:
    rid = hf("run", "-d", write(tmp_path, PENDING)).stdout.strip()
    assert "greet" in hf.step_states(rid)  # still one step: its list comes from 'names', sleeping
    proc = hf("logs", "-f", rid, "greet", timeout=60)
    # the items run side by side: a follower shows each line as it comes, in either order
    assert sorted(proc.stdout.splitlines()) == ["greet[0 a] | hello a", "greet[1 b] | hello b"]  # with its values
