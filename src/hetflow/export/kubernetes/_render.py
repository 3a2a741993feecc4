"""The objects as one YAML stream with a usage comment: same objects, same bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from hetflow.kube import LABEL_ROLE, LABEL_RUN, LABEL_WORKFLOW, NETWORK_POLICY


class _Dumper(yaml.SafeDumper):
    """Block style throughout; multi-line strings (the driver's script) as literal blocks;
    a value used twice is written twice (no &anchors and *aliases)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """One YAML stream, a document per object, with a comment saying how to use it.
    Deterministic: keys in the order the objects have them, no timestamps."""
    body = yaml.dump_all(
        [dict(o) for o in objects],
        Dumper=_Dumper,
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,
    )
    return _usage(objects) + body


def _usage(objects: Sequence[Mapping[str, Any]]) -> str:
    driver = next((o for o in objects if o.get("metadata", {}).get("labels", {}).get(LABEL_ROLE) == "driver"), None)
    if driver is None:
        return ""
    meta = driver["metadata"]
    run, name = meta["labels"][LABEL_RUN], meta["name"]
    ns = f" -n {meta['namespace']}" if "namespace" in meta else ""
    shared = ""
    if any(o.get("kind") == "NetworkPolicy" and o["metadata"]["name"] == NETWORK_POLICY for o in objects):
        shared = (
            f"#          NetworkPolicy {NETWORK_POLICY} is the namespace's, shared by every run (and the\n"
            "#          live backend): from the second run on, kubectl says it AlreadyExists\n"
        )
    return (
        f"# hetflow run {run} of workflow {meta['labels'][LABEL_WORKFLOW]}, exported for Kubernetes.\n"
        f"# Start:   kubectl create{ns} -f FILE   (create, not apply: a second apply would suspend\n"
        "#          the Jobs the driver has released)\n"
        f"{shared}"
        f"# Wait:    kubectl wait{ns} --for=condition=complete job/{name} --timeout=24h\n"
        f"# Follow:  kubectl logs{ns} -f job/{name}; a step: kubectl logs{ns} job/{name}-STEP\n"
        f"# Remove:  kubectl delete{ns} {_kinds(objects)} -l {LABEL_RUN}={run}\n"
    )


def _kinds(objects: Sequence[Mapping[str, Any]]) -> str:
    """What ``kubectl delete`` names: the run's kinds (not the claim, which may be shared)."""
    kinds = ["job", "networkpolicy", "rolebinding", "role", "serviceaccount"]
    present = {o.get("kind") for o in objects}
    kinds += [k for kind, k in (("Service", "service"), ("MPIJob", "mpijob")) if kind in present]
    return ",".join(kinds)
