"""``validate_objects``: the objects checked against the official client's models (the
OpenAPI schema) and the API server's own rules that no schema states.  The client is
imported only when validating."""

from __future__ import annotations

import difflib
import functools
import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from types import ModuleType
from typing import Any

import yaml

from hetflow.errors import HetflowError
from hetflow.export.kubernetes._gang import MPI_API
from hetflow.kube import DNS_LABEL_RE, DNS_SUBDOMAIN_RE, LABEL_NAME_RE, LABEL_VALUE_RE, QUANTITY_RE

KINDS: Mapping[tuple[str, str], str] = {
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Service"): "V1Service",
    ("v1", "Pod"): "V1Pod",
    ("batch/v1", "Job"): "V1Job",
    ("networking.k8s.io/v1", "NetworkPolicy"): "V1NetworkPolicy",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}
_LIST_T = re.compile(r"^(?:list|List)\[(.*)\]\Z")
_DICT_T = re.compile(r"^(?:dict\((\w+), (.*)\)|[Dd]ict\[(\w+), (.*)\])\Z")
_OPTIONAL_T = re.compile(r"^Optional\[(.*)\]\Z")
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def validate_objects(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem found in ``objects``, each as "Kind name: field.path: what"; empty
    when all are valid.

    The schema is the official client's (``pip install kubernetes``): its model classes
    carry the OpenAPI field names and types, so an unknown field, a snake_case key, a
    wrong type or a missing required field is caught as the API server would catch it.
    A few of the API server's own rules that no schema states are checked as well: names,
    labels, quantities, node selector operators, container and volume references.

    An MPIJob (kubeflow mpi-operator, ``kubeflow.org/v2beta1``) is checked against its
    CRD's openAPIV3Schema (vendored beside this module, read with ``jsonschema``), with
    unknown fields refused as ``kubectl create``'s strict field validation refuses them;
    each replica's pod template is then checked as a Job's is."""
    models = _client_models()
    problems: list[str] = []
    for i, obj in enumerate(objects):
        if not isinstance(obj, Mapping):
            problems.append(f"object {i + 1}: not a mapping but {type(obj).__name__}")
            continue
        kind, meta = obj.get("kind"), obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        what = f"{kind or 'object'} {name or i + 1}"
        if (obj.get("apiVersion"), kind) == (MPI_API, "MPIJob"):
            problems += [f"{what}: {p}" for p in _mpijob_problems(obj, models)]
            continue
        model = KINDS.get((str(obj.get("apiVersion")), str(kind)))
        if model is None:
            known = ", ".join([*(f"{a} {k}" for a, k in KINDS), f"{MPI_API} MPIJob"])
            problems.append(f"{what}: apiVersion {obj.get('apiVersion')!r} kind {kind!r} is not one of {known}")
            continue
        found = _check_type(obj, model, "", models)
        if not found:  # the client's own model, for anything the walk does not know
            found = _client_check(obj, model, models)
        found += _api_rules(obj)
        problems += [f"{what}: {p}" for p in found]
    return problems


_MPIJOB_SCHEMA = "mpijob-v2beta1.schema.yaml"


@functools.cache
def _mpijob_validator() -> Any:
    """A jsonschema validator for the vendored MPIJob schema.  A structural schema's
    objects with ``properties`` prune unknown fields, which kubectl's strict field
    validation (the default since 1.27) turns into errors: so they get
    ``additionalProperties: false`` unless the schema keeps unknown fields."""
    try:
        jsonschema = importlib.import_module("jsonschema")
    except ImportError:
        raise HetflowError("validating an MPIJob needs jsonschema: pip install jsonschema") from None
    text = resources.files("hetflow.export.kubernetes").joinpath(_MPIJOB_SCHEMA).read_text(encoding="utf-8")
    return jsonschema.Draft7Validator(_strict(yaml.safe_load(text)))


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) if k != "enum" else v for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
        and out.get("type", "object") == "object"
    ):
        out["additionalProperties"] = False
    return out


def _mpijob_problems(obj: Mapping[str, Any], models: ModuleType) -> list[str]:
    out = []
    for err in sorted(_mpijob_validator().iter_errors(dict(obj)), key=lambda e: [str(p) for p in e.absolute_path]):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".")
        message = err.message
        if err.validator == "additionalProperties":
            near = difflib.get_close_matches(
                next(iter(set(err.instance) - set(err.schema.get("properties", {}))), ""),
                list(err.schema.get("properties", {})),
                n=1,
            )
            message += f"; did you mean {near[0]!r}?" if near else ""
        out.append(f"{path or 'the object'}: {message} (MPIJob CRD schema)")
    if out:
        return out
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not DNS_LABEL_RE.match(meta["name"]):
        out.append("metadata.name: not a valid name (lowercase letters, digits and '-')")
    if isinstance(meta, Mapping):
        out += _label_rules(meta.get("labels"), "metadata.labels")
        out += _label_rules(meta.get("annotations"), "metadata.annotations", values=False)
    replicas = _get(obj, "spec", "mpiReplicaSpecs")
    for role in ("Launcher", "Worker"):
        if not isinstance(replicas, Mapping) or role not in replicas:
            out.append(f"spec.mpiReplicaSpecs.{role}: required replica type missing")
            continue
        at = f"spec.mpiReplicaSpecs.{role}.template"
        template = _get(replicas, role, "template")
        out += _check_type(template, "V1PodTemplateSpec", at, models)
        pod = _get(template, "spec")
        if isinstance(pod, Mapping):
            out += _label_rules(_get(template, "metadata", "labels"), f"{at}.metadata.labels")
            out += _pod_rules(pod, f"{at}.spec")
    return out


def _client_models() -> ModuleType:
    try:
        return importlib.import_module("kubernetes.client.models")
    except ImportError:
        raise HetflowError(
            "validating Kubernetes objects needs the official client: pip install 'kubernetes>=28'"
        ) from None


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _check_type(value: Any, type_name: str, path: str, models: ModuleType) -> list[str]:
    """``value`` against one OpenAPI type as the client names it (``V1PodSpec``,
    ``list[V1Container]`` or ``List[...]``, ``dict(str, str)``, ``dict[...]`` or
    ``Dict[...]``: the spellings of client versions 28 to 37)."""
    t = type_name.strip()
    if m := _OPTIONAL_T.match(t):
        t = m.group(1)
    where = path or "the object"
    if m := _LIST_T.match(t):
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {_kind_of(value)}"]
        return [p for i, v in enumerate(value) for p in _check_type(v, m.group(1), _at(path, i), models)]
    if m := _DICT_T.match(t):
        if not isinstance(value, Mapping):
            return [f"{where}: expected a mapping, got {_kind_of(value)}"]
        inner = m.group(2) or m.group(4)
        out = [f"{where}: key {k!r} is not a string" for k in value if not isinstance(k, str)]
        return out + [p for k, v in value.items() for p in _check_type(v, inner, _at(path, str(k)), models)]
    primitive = _PRIMITIVES.get(t)
    if primitive is not None:
        return [] if primitive(value) else [f"{where}: expected {t}, got {_kind_of(value)} ({value!r})"]
    if t == "object":
        return []
    cls = getattr(models, t, None)
    if cls is None or not hasattr(cls, "attribute_map"):
        return []  # a type this client does not model: nothing to check it against
    if not isinstance(value, Mapping):
        return [f"{where}: expected an object ({t}), got {_kind_of(value)}"]
    by_json = {j: a for a, j in cls.attribute_map.items()}
    out = []
    for key, v in value.items():
        attr = by_json.get(key)
        if attr is None:
            near = difflib.get_close_matches(str(key), list(by_json), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            out.append(f"{_at(path, str(key))}: unknown field{hint}")
        elif v is not None:
            out += _check_type(v, cls.openapi_types[attr], _at(path, key), models)
    for attr in _required(cls):
        if value.get(cls.attribute_map[attr]) is None:
            out.append(f"{_at(path, cls.attribute_map[attr])}: required field missing")
    return out


@functools.cache
def _required(cls: Any) -> tuple[str, ...]:
    """Required attributes of a client model.  The pydantic models (client 37+) say so;
    older ones only refuse None in their setters, so each setter is asked on a bare
    instance."""
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, Mapping):
        return tuple(a for a, f in fields.items() if f.is_required() and a in cls.attribute_map)
    probe = cls.__new__(cls)
    probe.local_vars_configuration = importlib.import_module("kubernetes.client").Configuration()
    required = []
    for attr in cls.attribute_map:
        try:
            setattr(probe, attr, None)
        except ValueError:
            required.append(attr)
    return tuple(required)


def _client_check(obj: Mapping[str, Any], model: str, models: ModuleType) -> list[str]:
    """Build the client's own model from ``obj``, for what the walk above cannot know."""
    cls = getattr(models, model)
    try:
        if hasattr(cls, "model_validate"):
            cls.model_validate(dict(obj))
        else:
            client = importlib.import_module("kubernetes.client")
            client.ApiClient()._ApiClient__deserialize(dict(obj), model)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        return [f"the client refuses it: {' '.join(str(exc).split())[:300]}"]
    return []


_PRIMITIVES: Mapping[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "datetime": lambda v: isinstance(v, str),
    "date": lambda v: isinstance(v, str),
}


def _kind_of(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}.get(
        type(value), type(value).__name__
    )


def _api_rules(obj: Mapping[str, Any]) -> list[str]:
    """Rules of the API server's validation (pkg/apis/*/validation) that matter here."""
    out: list[str] = []
    meta: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    name = meta.get("name")
    # A Job's name becomes a label value of its pods, so it must fit a DNS label.
    # A Service's name is a DNS-1035 label: a letter first.
    name_re = DNS_LABEL_RE if obj.get("kind") in ("Job", "Service") else DNS_SUBDOMAIN_RE
    if obj.get("kind") == "Service" and isinstance(name, str) and not name[:1].isalpha():
        out.append(f"metadata.name: a Service's name {name!r} must start with a letter")
    if not isinstance(name, str) or not name_re.match(name):
        out.append(f"metadata.name: {name!r} is not a valid name (lowercase letters, digits and '-')")
    out += _label_rules(meta.get("labels"), "metadata.labels")
    out += _label_rules(meta.get("annotations"), "metadata.annotations", values=False)
    spec: Mapping[str, Any] = obj["spec"] if isinstance(obj.get("spec"), Mapping) else {}
    if obj.get("kind") == "PersistentVolumeClaim":
        out += _quantities(_get(spec, "resources", "requests"), "spec.resources.requests")
    pod, at = (spec, "spec") if obj.get("kind") == "Pod" else (_get(spec, "template", "spec"), "spec.template.spec")
    if isinstance(pod, Mapping):
        out += _label_rules(_get(spec, "template", "metadata", "labels"), "spec.template.metadata.labels")
        out += _pod_rules(pod, at)
        if obj.get("kind") == "Job":
            if pod.get("restartPolicy") not in ("Never", "OnFailure"):
                out.append(f"{at}.restartPolicy: a Job's pods must use Never or OnFailure")
            if "podFailurePolicy" in spec and pod.get("restartPolicy") != "Never":
                out.append(f"{at}.restartPolicy: podFailurePolicy needs restartPolicy Never")
    return out


def _get(value: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(k)
    return value


def _label_rules(labels: Any, at: str, *, values: bool = True) -> list[str]:
    if not isinstance(labels, Mapping):
        return []
    out = []
    for k, v in labels.items():
        prefix, _, key = str(k).rpartition("/")
        if not LABEL_NAME_RE.match(key) or (prefix and not DNS_SUBDOMAIN_RE.match(prefix)):
            out.append(f"{at}: key {k!r} is not a valid qualified name")
        if values and not (isinstance(v, str) and LABEL_VALUE_RE.match(v)):
            out.append(f"{at}.{k}: value {v!r} is not a valid label value")
    return out


def _quantities(resources: Any, at: str) -> list[str]:
    if not isinstance(resources, Mapping):
        return []
    return [
        f"{at}.{k}: {v!r} is not a quantity (e.g. 500m, 2, 512Mi)"
        for k, v in resources.items()
        if not (isinstance(v, str) and QUANTITY_RE.match(v))
    ]


def _pod_rules(pod: Mapping[str, Any], at: str) -> list[str]:
    out: list[str] = []
    volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, Mapping)}
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, c in enumerate(pod.get(field) or []):
            if not isinstance(c, Mapping):
                continue
            where = f"{at}.{field}[{i}]"
            cname = c.get("name")
            if not isinstance(cname, str) or not DNS_LABEL_RE.match(cname) or cname in seen:
                out.append(f"{where}.name: {cname!r} is not a unique DNS label")
            seen.add(str(cname))
            for part in ("requests", "limits"):
                out += _quantities(_get(c, "resources", part), f"{where}.resources.{part}")
            for j, m in enumerate(c.get("volumeMounts") or []):
                if not isinstance(m, Mapping):
                    continue
                if m.get("name") not in volumes:
                    out.append(f"{where}.volumeMounts[{j}].name: no volume {m.get('name')!r} in the pod")
                if not str(m.get("mountPath", "")).startswith("/"):
                    out.append(f"{where}.volumeMounts[{j}].mountPath: must be absolute")
                sub = m.get("subPath")
                if sub is not None and (str(sub).startswith("/") or ".." in str(sub).split("/")):
                    out.append(f"{where}.volumeMounts[{j}].subPath: must be relative, without '..'")
    terms = _get(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    for i, term in enumerate(terms or []):
        for j, e in enumerate(_get(term, "matchExpressions") or []):
            out += _expression(e, f"{at}.affinity...nodeSelectorTerms[{i}].matchExpressions[{j}]")
    return out


def _expression(e: Any, at: str) -> list[str]:
    """NodeSelectorRequirement (core/validation ValidateNodeSelectorRequirement)."""
    if not isinstance(e, Mapping):
        return []
    op, values = e.get("operator"), e.get("values") or []
    if op not in _NODE_OPERATORS:
        return [f"{at}.operator: {op!r} is not one of {', '.join(_NODE_OPERATORS)}"]
    if op in ("In", "NotIn") and not values:
        return [f"{at}.values: {op} needs at least one value"]
    if op in ("Exists", "DoesNotExist") and values:
        return [f"{at}.values: {op} takes no values"]
    if op in ("Gt", "Lt") and (len(values) != 1 or not re.fullmatch(r"-?\d+", str(values[0]))):
        return [f"{at}.values: {op} takes exactly one integer, got {values!r}"]
    return []
