"""The fields of a step that take ``{{ ... }}`` templates, named once.

``params`` fills ``{{ params.NAME }}`` and ``fanout`` fills ``{{ item }}``, ``{{ item.FIELD }}``
and ``{{ index }}`` into the same fields, so a field that takes one takes the other (issue 37:
``publish: {to: "{{ params.to }}"}`` was filled for a fan-out's items but never for params, and
ran into a folder literally named ``{{ params.to }}``): the image, the command, env values,
input references, outputs, the keys of ``sizes`` and each publish entry's ``to`` and
``outputs``, in the step and in each of its variants (image, command, env).  ``when`` is a
condition, not a template: params are names there (``spec.validate.when``), and a fan-out fills its
items in as literals, so it is given its own ``sub``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hetflow.spec.models import Step
from hetflow.spec.source.yamlfile import Loc

Sub = Callable[[str, Loc], str]  # (text, where it was written) -> the text filled in


def templated_fields(step: Step, base: Loc, sub: Sub, when: Sub | None = None) -> dict[str, Any]:
    """The model_copy update that fills ``sub`` into every templated field of ``step``
    (``base``: the step's location, ``("steps", NAME)``); ``when`` for its condition."""
    update: dict[str, Any] = {}
    if when is not None and step.when is not None:
        update["when"] = when(step.when, (*base, "when"))
    if step.image is not None:
        update["image"] = sub(step.image, (*base, "image"))
    if step.command is not None:
        update["command"] = tuple(sub(a, (*base, "command", i)) for i, a in enumerate(step.command))
    update["env"] = {k: sub(v, (*base, "env", k)) for k, v in step.env.items()}
    update["inputs"] = {k: sub(v, (*base, "inputs", k)) for k, v in step.inputs.items()}
    update["outputs"] = tuple(sub(o, (*base, "outputs", i)) for i, o in enumerate(step.outputs))
    update["sizes"] = {sub(k, (*base, "sizes", k)): v for k, v in step.sizes.items()}
    update["publish"] = tuple(
        p.model_copy(
            update={
                "to": sub(p.to, (*base, "publish", i, "to")),
                "outputs": tuple(sub(o, (*base, "publish", i, "outputs", j)) for j, o in enumerate(p.outputs)),
            }
        )
        for i, p in enumerate(step.publish)
    )
    if step.variants is not None:
        update["variants"] = {
            name: v.model_copy(
                update={
                    "image": sub(v.image, (*base, "variants", name, "image")),
                    "command": tuple(sub(a, (*base, "variants", name, "command", i)) for i, a in enumerate(v.command)),
                    "env": {k: sub(x, (*base, "variants", name, "env", k)) for k, x in v.env.items()},
                }
            )
            for name, v in step.variants.items()
        }
    return update
