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
