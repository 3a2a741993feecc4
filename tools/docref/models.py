"""The file formats' reference, from the pydantic models (``tools.docref`` writes the pages).

``model_page`` renders a model and every model under it as a table per model: the key as a
file spells it (its alias), the type as it is written (``20s`` for a duration, ``2Gi`` for
memory), the default and the field's description (else the comment beside or above the
field in the source).  ``workflow_schema`` is the JSON Schema of a workflow file as written:
pydantic's own schema describes the models after their shorthands are expanded (``estimate``
is a number of seconds there, ``publish`` a list), so each shorthand the models accept
before validation widens the field it applies to (``SHORTHANDS``, ``FIELD_SHORTHANDS``);
tests/unit/test_docs.py validates every example workflow against it, so a shorthand that
is missing here fails there."""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticUndefined, core_schema

# how a value of a field with this before-validator is written in a file
WRITTEN = {
    "parse_duration": "duration (`20s`, `4m`, `1h30m`)",
    "coerce_grace": "duration (`20s`, `4m`, `1h30m`)",
    "_wait": "duration (`20s`, `4m`, `1h30m`)",
    "parse_memory": "quantity (`512Mi`, `2Gi`)",
    "parse_bandwidth": "bandwidth (`10Gbit/s`, `1.25GB/s`, bytes/s)",
    "parse_factor": "factor (`x2`, `x1.5`)",
}
STRING: JsonSchemaValue = {"type": "string"}
SCALAR: JsonSchemaValue = {"type": ["string", "number", "boolean"]}
# before-validator -> what else it accepts than the type it makes (JSON Schema), given that type's schema
SHORTHANDS: dict[str, Callable[[JsonSchemaValue], list[JsonSchemaValue]]] = {
    **{name: lambda _: [STRING] for name in WRITTEN},
    "_command": lambda _: [{"type": "array", "items": SCALAR}],
    "_coerce_data": lambda _: [STRING],
    "_coerce_publish": lambda made: [STRING, made.get("items", {})],
    "coerce_batch": lambda _: [{"type": ["integer", "boolean"]}],
    "coerce_checkpoint": lambda _: [{"type": "boolean"}],
    "_coerce_backoff": lambda _: [{"type": ["string", "number"]}],
    "_cc": lambda _: [{"type": "number"}],
}
# fields a model's own before-validator rewrites: (model, field) -> what else the file may write
FIELD_SHORTHANDS: dict[tuple[str, str], JsonSchemaValue] = {
    ("Batch", "target"): STRING,
    ("Checkpoint", "every"): STRING,
    ("Gang", "replicas"): {
        "type": "object",
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
        "required": ["min", "max"],
        "additionalProperties": False,
    },
}


class _AsWritten(GenerateJsonSchema):
    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        made = super().function_before_schema(schema)
        name = getattr(schema["function"]["function"], "__name__", "")
        extra = SHORTHANDS.get(name)
        return {"anyOf": [made, *extra(made)]} if extra else made


def workflow_schema(root: type[BaseModel], title: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a file of ``root`` as users write it."""
    schema = root.model_json_schema(schema_generator=_AsWritten)
    defs = schema.get("$defs", {})
    for cls in _models(root):  # the source's comments where a field has no description
        said, props = field_comments(cls), defs.get(cls.__name__, schema)["properties"]
        for name, info in cls.model_fields.items():
            prop = props.get(info.alias or name)
            if prop is not None and "description" not in prop and said.get(name):
                prop["description"] = said[name]
    for (model, field), extra in FIELD_SHORTHANDS.items():
        prop = defs[model]["properties"][field]
        defs[model]["properties"][field] = {"anyOf": [prop, extra], **_keep(prop)}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": title}


def _keep(prop: JsonSchemaValue) -> JsonSchemaValue:
    return {k: prop[k] for k in ("title", "description", "default") if k in prop}


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comment beside it (``x: int = 1  # ...``) or in the lines just above."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    found: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        line = lines[node.end_lineno - 1 if node.end_lineno else node.lineno - 1]
        said = line.split("  # ", 1)[1].strip() if "  # " in line else ""
        above: list[str] = []
        i = node.lineno - 2
        while not said and i >= 0 and lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("#").strip())
            i -= 1
        found[node.target.id] = said or " ".join(above)
    return found


def own_doc(cls: type) -> str:
    """The class's own docstring: not one it inherits, nor the signature a dataclass makes up."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or doc.startswith(f"{cls.__name__}("):
        return ""
    return inspect.cleandoc(doc)


def _before(meta: Sequence[Any]) -> str | None:
    for m in meta:
        if isinstance(m, BeforeValidator):
            return getattr(m.func, "__name__", None)
    return None


def type_text(t: Any) -> str:
    """A field's type as a file writes it, models linked to their table."""
    origin, args = get_origin(t), get_args(t)
    if origin is Annotated:
        written = WRITTEN.get(_before(args[1:]) or "")
        return written or type_text(args[0])
    if t is type(None):
        return "null"
    if origin in (Union, types.UnionType):
        return " or ".join(type_text(a) for a in args)
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if isinstance(t, type) and issubclass(t, BaseModel):
        return f"[{t.__name__}](#{t.__name__.lower()})"
    if origin in (list, tuple, Sequence) and args:
        return f"list of {type_text(args[0])}"
    if origin in (dict, Mapping) and len(args) == 2:
        return f"map of {type_text(args[0])} to {type_text(args[1])}"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(t, getattr(t, "__name__", str(t)))


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields name, in the order first met (breadth first)."""
    seen: list[type[BaseModel]] = [root]
    for model in seen:
        for field in model.model_fields.values():
            for t in _leaves(field.annotation):
                if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen:
                    seen.append(t)
    return seen


def _leaves(t: Any) -> list[Any]:
    args = get_args(t)
    if get_origin(t) is Annotated:
        return _leaves(args[0])
    return [t] if not args else [leaf for a in args for leaf in _leaves(a)]


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value in ((), [], {}, None, ""):
        return "-" if value is None or value == "" else "`[]`" if not isinstance(value, dict) else "`{}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def model_page(title: str, intro: str, roots: Sequence[type[BaseModel]]) -> str:
    """A markdown page: ``intro``, then a table for each model under ``roots``."""
    out = [f"# {title}", "", intro.strip(), ""]
    done: list[type[BaseModel]] = []
    for root in roots:
        for model in _models(root):
            if model in done:
                continue
            done.append(model)
            out += _model_table(model)
    return "\n".join(out).rstrip() + "\n"


def _model_table(model: type[BaseModel]) -> list[str]:
    said = field_comments(model)
    out = [f"## {model.__name__}", ""]
    doc = own_doc(model)
    if doc:
        out += [doc, ""]
    out += ["| key | type | default | what |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        what = field.description or said.get(name, "")
        hint = _shorthand(field.metadata)
        if hint:
            what = f"{what} ({hint})" if what else hint
        row = [f"`{field.alias or name}`", type_text(_annotated(field)), _default(field), what]
        out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return [*out, ""]


def _annotated(field: Any) -> Any:
    """The field's type with its validators (pydantic keeps them apart, in ``metadata``)."""
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _shorthand(meta: Sequence[Any]) -> str:
    """The docstring's first line of a shorthand a field accepts (``publish: results``)."""
    for m in meta:
        if isinstance(m, BeforeValidator) and getattr(m.func, "__name__", "") not in WRITTEN:
            doc = inspect.getdoc(m.func)
            return doc.split("\n\n", 1)[0] if doc else ""
    return ""
