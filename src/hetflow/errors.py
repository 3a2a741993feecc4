"""hetflow's one exception tree.

Every error a user can cause is a ``HetflowError``; the CLI prints its message and
exits non-zero without a traceback.  Anything else escaping is a bug.

    HetflowError
    ├── SpecError          a workflow file is malformed or impossible (carries problems)
    ├── InventoryError     hardware discovery failed or a fake-GPU setting is malformed
    ├── NoFitError         a step cannot be placed on any node (carries reasons)
    ├── EngineError        the container engine is missing or refused a command
    ├── StateError         the state store is unreadable, or a run/step id is unknown
    └── UsageError         a bad command-line value (a malformed -p, an unknown step)

"Does not fit" during placement is a value (see ``plan.onemachine.choose``), not an exception;
``NoFitError`` is raised only where the caller has to give up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class HetflowError(Exception):
    """Base of every error hetflow reports to a user."""

    exit_code: int = 2


@dataclass(frozen=True)
class Problem:
    """One finding about a workflow: where, what, and how bad."""

    file: str
    line: int
    message: str
    severity: str = "error"  # "error" or "note"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity}: {self.message}"


class SpecError(HetflowError):
    """A workflow is malformed; ``problems`` holds every finding, each with file:line."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        errors = [p for p in self.problems if p.severity == "error"]
        super().__init__("\n".join(str(p) for p in errors or self.problems))


class InventoryError(HetflowError):
    """Hardware discovery failed, or a fake-GPU setting is malformed."""


class NoFitError(HetflowError):
    """No node can run a step; the message lists every reason."""


class EngineError(HetflowError):
    """The container engine is missing, or one of its commands failed."""


class StateError(HetflowError):
    """The state store cannot be used, or names an unknown run or step."""


class UsageError(HetflowError):
    """A command-line value is malformed."""
