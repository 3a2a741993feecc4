"""The command table: which module registers which commands (``hetflow.cli.main`` answers
bash's first-word completion from it; ``hetflow.cli.app`` registers only the module a command
line needs).  Its own module, so that main and app both read it and neither imports the other
at its top."""

from __future__ import annotations

from hetflow.errors import HetflowError

# The command modules and the commands each registers: a command line loads only the module
# its command is in (`hetflow ps` needs none of the planner, the registry or the images);
# --help, no command or an unknown one loads them all.  tests/unit/test_cli_commands.py
# checks this table against what the modules register.
COMMANDS: dict[str, tuple[str, ...]] = {
    "run.runs": ("run", "resume", "ps", "show", "stop", "_execute"),
    "run.logs": ("logs",),
    "run.record": ("trace", "report"),
    "planning.plan": ("plan", "simulate", "cluster", "profile", "import", "export"),
    "oci.images": ("images",),
    "oci.registry": ("registry",),
    "run.cache": ("cache",),
    "run.doctor": ("doctor",),
    "run.moves": ("migrate", "drain"),
    "ui": ("ui",),
    "tes": ("tes",),
    "shell": ("completion",),
    "schema": ("schema",),
}


VERSION_FLAGS = ("--version", "-V")
OWN_COMMANDS = ("validate", "nodes")  # hetflow.cli.app's own

VERSION_FLAGS = ("--version", "-V")
OWN_COMMANDS = ("validate", "nodes")  # hetflow.cli.app's own
BAD_INPUT = HetflowError.exit_code  # 2, as for every HetflowError (docs/getting-started.md: exit status)
