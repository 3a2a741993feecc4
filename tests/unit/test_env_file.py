"""A step's environment as podman's --env-file: private, verbatim, and never on the argv."""

from __future__ import annotations

import stat

import pytest

from hetflow.errors import EngineError
from hetflow.execute import ContainerSpec
from hetflow.execute.engine import drop_env_file, run_args, write_env_file


def test_the_env_file_is_private_verbatim_and_replaces_env_on_the_argv() -> None:
    env = {"SECRET": "xyz", "SPACED": " a b ", "QUOTED": '"q"', "EQ": "a=b"}
    path = write_env_file(env)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert path.read_text().splitlines() == [f"{k}={v}" for k, v in sorted(env.items())]
        spec = ContainerSpec(name="c", image="img", command=("true",), user="1:1", labels={}, env=env)
        argv = run_args(spec, env_file=path)
        assert ["--env-file", str(path)] == argv[argv.index("--env-file") : argv.index("--env-file") + 2]
        assert "--env" not in argv and not any("xyz" in a for a in argv)
    finally:
        drop_env_file(path)
    assert not path.parent.exists()


@pytest.mark.parametrize("value", ["two\nlines", "cr\r", "nul\0", "x" * 70_000], ids=["newline", "cr", "nul", "long"])
def test_a_value_the_env_file_cannot_carry_is_refused_naming_it(value: str) -> None:
    with pytest.raises(EngineError, match="env BAD"):
        write_env_file({"OK": "1", "BAD": value})


def test_a_ray_tasks_podman_run_reads_the_env_from_a_file_not_its_argv() -> None:
    """On a Ray node the task writes the step's env to a private file for ``podman run
    --env-file``: no value is on the node's command line (the local runner does the same)."""
    from hetflow.execute.backends.ray.container import foreground_argv
    from hetflow.execute.engine import ContainerSpec, drop_env_file, write_env_file

    spec = ContainerSpec(name="hf-r-s-1", image="img", command=("true",), user="0:0", labels={}, env={"K": "v4lue"})
    env_file = write_env_file(spec.env)
    try:
        argv = foreground_argv(spec, env_file)
        assert not [a for a in argv if "v4lue" in a]
        assert argv[argv.index("--env-file") + 1] == str(env_file)
        assert env_file.read_text() == "K=v4lue\n" and env_file.stat().st_mode & 0o777 == 0o600
    finally:
        drop_env_file(env_file)
    assert not env_file.parent.exists()
