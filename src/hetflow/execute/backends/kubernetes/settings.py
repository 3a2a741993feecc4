"""Where and how the Kubernetes backend submits: ``KubernetesSettings``, from the config
file's ``kubernetes:`` section (YAML values, or strings from HETFLOW_* variables)::

    kubernetes:
      kubeconfig: ~/.kube/config     # default: $KUBECONFIG, else ~/.kube/config
      context: prod                  # default: the kubeconfig's current context
      namespace: ml                  # default: "default"
      image_pull_policy: IfNotPresent
      volume: hostPath               # the work directory as a hostPath at the same path (the
                                     # nodes mount it there: NFS, or one node); or
      claim: hetflow-work            # a PersistentVolumeClaim (ReadWriteMany) whose root this
      claim_root: /mnt/hetflow       # machine sees at claim_root: mounts under it use subPath
      gpu_api: auto                  # device-plugin | dra | auto (dra where the API serves it)
      device_class: gpu.nvidia.com   # the DRA DeviceClass of NVIDIA GPUs
      stop_timeout: 10               # terminationGracePeriodSeconds: SIGTERM, then SIGKILL
      submit_threads: 16             # attempts' objects created at once (``creations``)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.errors import UsageError
from hetflow.execute.backends.common import pairs, text
from hetflow.execute.backends.plugin import RunSettings

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
GPU_APIS = ("auto", "device-plugin", "dra")
VOLUMES = ("hostPath", "claim")
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"  # NVIDIA's DRA driver's DeviceClass for whole GPUs


@dataclass(frozen=True)
class KubernetesSettings:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = "default"
    image_pull_policy: str = "IfNotPresent"
    volume: str = "hostPath"
    claim: str | None = None
    claim_root: str | None = None
    gpu_api: str = "auto"
    device_class: str = DEFAULT_DEVICE_CLASS
    stop_timeout: int = 10
    submit_threads: int = 16
    labels: Mapping[str, str] = field(default_factory=dict)  # more labels on every pod (a site's policy)

    @classmethod
    def from_backend(cls, settings: RunSettings) -> KubernetesSettings:
        return cls.from_mapping(settings.section("kubernetes"))

    @classmethod
    def from_mapping(cls, m: Mapping[str, object]) -> KubernetesSettings:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(m) - known)
        if unknown:
            raise UsageError(
                f"kubernetes settings: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        kw: dict[str, object] = {k: text(m, k) for k in ("kubeconfig", "context", "claim", "claim_root") if text(m, k)}
        for key, allowed in (("image_pull_policy", PULL_POLICIES), ("gpu_api", GPU_APIS), ("volume", VOLUMES)):
            value = text(m, key)
            if value is not None:
                if value not in allowed:
                    raise UsageError(f"kubernetes settings: {key}={value!r} is not one of {', '.join(allowed)}")
                kw[key] = value
        for key in ("namespace", "device_class"):
            if text(m, key):
                kw[key] = text(m, key)
        for key, what in (("stop_timeout", "whole seconds"), ("submit_threads", "a whole number of threads")):
            if text(m, key) is not None:
                try:
                    kw[key] = int(str(text(m, key)))
                except ValueError:
                    raise UsageError(f"kubernetes settings: {key}={m[key]!r} is not {what}") from None
        if int(str(kw.get("submit_threads", 1))) < 1:
            raise UsageError(f"kubernetes settings: submit_threads={m['submit_threads']!r}: give 1 or more")
        if m.get("labels"):
            kw["labels"] = pairs(m["labels"])
        if kw.get("claim") and not kw.get("claim_root"):
            raise UsageError(
                "kubernetes settings: claim needs claim_root, the folder where this machine sees the claim's root "
                "(hetflow writes inputs there and reads outputs back)"
            )
        if kw.get("claim"):
            kw["volume"] = "claim"
        return cls(**kw)  # type: ignore[arg-type]

    def kubeconfig_path(self, env: Mapping[str, str] | None = None) -> Path:
        """The kubeconfig to read: the setting, else $KUBECONFIG (its first file), else ~/.kube/config."""
        env = os.environ if env is None else env
        if self.kubeconfig:
            return Path(self.kubeconfig).expanduser()
        if env.get("KUBECONFIG"):
            return Path(env["KUBECONFIG"].split(os.pathsep)[0]).expanduser()
        return Path("~/.kube/config").expanduser()
