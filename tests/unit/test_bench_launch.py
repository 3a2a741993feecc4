"""bench.local.launch's replay of hetflow's recorded podman arguments: the same step under another
OCI runtime, the global options kept, run attached and removed (``--rm``)."""

from __future__ import annotations

import shlex

import pytest
from bench.local.launch import loop_command, run_at

RECORDED = ["--hooks-dir", "/s/hooks.d", "--runtime", "runc", "run", "--sig-proxy=false", "--name", "n1", "img", "true"]


@pytest.mark.parametrize(
    ("argv", "at"),
    [
        (RECORDED, 4),
        (["--hooks-dir", "/s/hooks.d", "run", "-d", "--name", "n1", "img", "true"], 2),
        (["--hooks-dir", "/s", "container", "exists", "n1"], -1),
        (["--hooks-dir", "/s", "run", "img", "true"], -1),  # no --name: not a step's container
        (["--hooks-dir", "run"], -1),
    ],
    ids=["attached", "detached", "other-command", "unnamed", "truncated"],
)
def test_the_run_of_a_step_is_found_after_the_global_options(argv: list[str], at: int) -> None:
    assert run_at(argv) == at


@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_the_replay_runs_the_same_step_under_the_runtime_asked(runtime: str) -> None:
    words = shlex.split(loop_command(RECORDED, "/usr/bin/podman", runtime).removesuffix(" >/dev/null"))

    assert words == [
        "/usr/bin/podman", "--hooks-dir", "/s/hooks.d", "--runtime", runtime,
        "run", "--rm", "--sig-proxy=false", "--name", "n1", "img", "true",
    ]  # fmt: skip
