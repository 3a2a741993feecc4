"""A stored task as each view shows it (the API's ``view`` parameter): MINIMAL is the id
and state; BASIC drops what may be large (executors' stdout and stderr, inputs' content, the
system logs); FULL is everything."""

from __future__ import annotations

from typing import Any

from hetflow.tes.messages.models import Task, View


def render(task: Task, view: View) -> dict[str, Any]:
    """The JSON object of ``task`` in ``view`` (fields with no value left out)."""
    if view is View.MINIMAL:
        return {"id": task.id, "state": task.state}
    body = task.model_dump(mode="json", exclude_none=True)
    if view is View.FULL:
        return body
    for item in body.get("inputs", []):
        item.pop("content", None)
    for log in body.get("logs", []):
        log.pop("system_logs", None)
        for ex in log.get("logs", []):
            ex.pop("stdout", None)
            ex.pop("stderr", None)
    return body
