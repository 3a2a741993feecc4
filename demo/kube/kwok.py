"""kwok's configuration for the local Kubernetes test cluster (demo/kube/cluster.py): the pod
stages of hetflow's test convention in place of kwok's defaults, and the log every kwok pod serves.

The test convention (kwok stages keyed on the pod labels ``hetflow.step`` and ``hetflow.attempt``):

    default   Pending -> Running at once; Succeeded (exit 0) 0.3 s later, for a pod owned by a Job
    fails     Running, then Failed: container terminated with exit code 3, reason Error
    flaky     as ``fails`` when hetflow.attempt=1, as default otherwise
    oom       Running, then Failed: exit code 137, reason OOMKilled
    holds     Running until deleted
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

_NOT_DELETED: Obj = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_RUNNING: Obj = {"key": ".status.phase", "operator": "In", "values": ["Running"]}
_OWNED_BY_JOB: Obj = {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}
_STEP = '.metadata.labels["hetflow.step"]'
_ATTEMPT = '.metadata.labels["hetflow.attempt"]'

# kwok's pod-ready stage (kustomize/stage/pod/fast/pod-ready.yaml at v0.7.0), init containers left out
_READY = """{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""

# a running pod deleted: every container ended by SIGTERM, the pod Failed; its conditions
# (the API server's DisruptionTarget on an eviction) left as they are
_TERMINATED = """{{ $now := Now }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated: {exitCode: 143, reason: Error, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
{{ end }}
phase: Failed
"""

# every container terminated with EXIT and REASON; the pod PHASE
_END = """{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "False", type: Ready, reason: PodCompleted}
- {lastTransitionTime: {{ $now | Quote }}, status: "False", type: ContainersReady, reason: PodCompleted}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated: {exitCode: EXIT, reason: REASON, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}
{{ end }}
phase: PHASE
"""


def _stage(name: str, selector: Sequence[Obj], nxt: Obj, delay_ms: int = 0) -> Obj:
    spec: Obj = {"resourceRef": {"apiGroup": "v1", "kind": "Pod"}, "selector": {"matchExpressions": list(selector)}}
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms}
    spec["next"] = nxt
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _step_in(step: str) -> Obj:
    return {"key": _STEP, "operator": "In", "values": [step]}


def _end(exit_code: int, reason: str, phase: str) -> Obj:
    text = _END.replace("EXIT", str(exit_code)).replace("REASON", reason).replace("PHASE", phase)
    return {"statusTemplate": text}


def kwok_config(logs_file: Path, delay_ms: int = 300) -> str:
    """kwok's configuration (--config): the pod stages of the test convention (this module's
    docstring) in place of kwok's defaults, and one ClusterLogs rule by which every pod's
    every container serves ``logs_file`` (CRI log format) as its log through the API server."""
    special = ["fails", "flaky", "oom", "holds"]
    ended: list[Obj] = [_NOT_DELETED, _RUNNING]
    stages = [
        _stage(
            "pod-ready",
            [_NOT_DELETED, {"key": ".status.podIP", "operator": "DoesNotExist"}],
            {"statusTemplate": _READY},
        ),
        _stage(
            "pod-complete",
            [*ended, _OWNED_BY_JOB, {"key": _STEP, "operator": "NotIn", "values": special}],
            _end(0, "Completed", "Succeeded"),
            delay_ms,
        ),
        _stage(
            "pod-complete-flaky-retry",
            [*ended, _OWNED_BY_JOB, _step_in("flaky"), {"key": _ATTEMPT, "operator": "NotIn", "values": ["1"]}],
            _end(0, "Completed", "Succeeded"),
            delay_ms,
        ),
        _stage(
            "pod-fails",
            [*ended, _step_in("fails")],
            _end(3, "Error", "Failed"),
            delay_ms,
        ),
        _stage(
            "pod-fails-flaky-first",
            [*ended, _step_in("flaky"), {"key": _ATTEMPT, "operator": "In", "values": ["1"]}],
            _end(3, "Error", "Failed"),
            delay_ms,
        ),
        _stage(
            "pod-oom",
            [*ended, _step_in("oom")],
            _end(137, "OOMKilled", "Failed"),
            delay_ms,
        ),
        # a kubelet's part when a running pod is deleted (stopped, evicted, preempted): its
        # container ends on SIGTERM and the pod is Failed, keeping the conditions the API
        # server gave it (DisruptionTarget), before it may go: the Job controller reads that
        _stage(
            "pod-terminate",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}, _RUNNING],
            {"statusTemplate": _TERMINATED},
        ),
        # kwok's pod-delete (kustomize/stage/pod/general): a deleted pod that no longer runs
        # goes once its finalizers are gone (the Job controller removes its tracking finalizer
        # when it has counted the pod), at once: no kubelet to wait for its grace period
        _stage(
            "pod-delete",
            [
                {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                {"key": ".status.phase", "operator": "NotIn", "values": ["Running"]},
                {"key": ".metadata.finalizers", "operator": "DoesNotExist"},
            ],
            {"delete": True},
        ),
    ]
    logs: Obj = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "every-pod"},
        "spec": {"logs": [{"logsFile": str(logs_file), "follow": False}]},
    }
    return yaml.safe_dump_all([*stages, logs], sort_keys=False)


def cri_log(lines: Sequence[str]) -> str:
    """``lines`` in the CRI container log format kwok's log server reads (as a kubelet's)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{now} stdout F {line}\n" for line in lines)
