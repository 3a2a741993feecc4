"""A credential written into a step's ``env:`` (issue 42): a variable named like one
(``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*KEY*``) with a literal value that looks like
one is stored with the run, shown by ``hetflow show`` and kept in the cache key's text;
``secrets:`` passes it to the container without any of that.  One note for the whole file
(at the first such variable, naming every one), so a sweep of a hundred items says it once."""

from __future__ import annotations

import re
from collections.abc import Callable

from hetflow.errors import Problem
from hetflow.spec.fields.naming import fanout_parent
from hetflow.spec.models import Workflow

LineOf = Callable[[tuple[str | int, ...]], int]

CREDENTIAL_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY", re.IGNORECASE)
MIN_LENGTH = 8  # 'true', '1', 'yes' and the like are switches, not credentials


def looks_like_credential(name: str, value: str) -> bool:
    """A name like a credential's and a value that could be one: a literal of at least
    ``MIN_LENGTH`` characters, no blanks, not a path and not a reference (``$X``, ``{{ }}``)."""
    if not CREDENTIAL_NAME.search(name) or len(value) < MIN_LENGTH or any(c.isspace() for c in value):
        return False
    return not value.startswith(("/", "./", "$", "{{"))


def env_credential_note(wf: Workflow, file: str, line_of: LineOf) -> list[Problem]:
    """One note naming every ``env:`` variable that looks like a credential ([] when none)."""
    found: dict[tuple[str, str], int] = {}  # (step, variable) -> its line, in file order
    for name, step in wf.steps.items():
        shown = fanout_parent(name) or name  # a fan-out's items repeat their step's env
        envs: list[tuple[tuple[str | int, ...], dict[str, str]]] = [(("steps", name, "env"), step.env)]
        envs += [(("steps", name, "variants", v, "env"), var.env) for v, var in (step.variants or {}).items()]
        for loc, env in envs:
            for key, value in env.items():
                if (shown, key) not in found and looks_like_credential(key, value):
                    found[(shown, key)] = line_of((*loc, key))
    if not found:
        return []
    first = min(found.values())
    names = ", ".join(f"{key} of step {step!r}" for (step, key) in found)
    secrets = sorted({key for _, key in found})
    return [
        Problem(
            file,
            first,
            f"env: looks like it holds a credential ({names}); a value in env: is stored with the run and shown by"
            f" hetflow show: use secrets: [{', '.join(secrets)}] on the step and give the value in hetflow's"
            " environment or --secrets-file FILE",
            "note",
        )
    ]
