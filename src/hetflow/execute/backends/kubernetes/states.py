"""A Job and its pods, as the API server returns them (plain JSON), read as one ``JobState``
(pure functions, for tests).

- A pod's container ``terminated`` state gives the exit code, its start and end; reason
  ``OOMKilled`` is the kernel's OOM killer (exit 137, as podman reports it).
- A pod that waits on its image (``ErrImagePull``, ``ImagePullBackOff``, ``ErrImageNeverPull``,
  ``InvalidImageName``) or on its configuration (``CreateContainerConfigError``) will not start
  by itself: the attempt ends with podman's own-failure code 125 and Kubernetes' message.
- A pod the scheduler cannot place is queued (``PodScheduled=False``), with its reason; so is
  a Job whose pods cannot be created yet (a ResourceQuota: the ``FailedCreate`` event's text).
- A Job failed by the ``DisruptionTarget`` rule (``translate``: node gone, eviction,
  preemption) ends ``node_failed``: hetflow runs it again as a new attempt.
- A gang (Indexed Job): running until every index succeeded or one failed; the first
  failure's code is the gang's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.common import KILLED_CODE, LOST_CODE
from hetflow.execute.engine import Usage

Obj = Mapping[str, Any]
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName")
CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
ERROR_CODE = 125  # podman's code for a container it could not start
OOM_CODE = KILLED_CODE
DISRUPTION = "DisruptionTarget"


def epoch(stamp: str | None) -> float | None:
    """An RFC 3339 time from the API (``2026-11-27T08:30:00Z``) in epoch seconds."""
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def condition(obj: Obj, kind: str) -> Obj | None:
    for c in obj.get("status", {}).get("conditions") or ():
        if c.get("type") == kind and c.get("status") == "True":
            found: Obj = c
            return found
    return None


def _container(pod: Obj) -> Obj:
    statuses = pod.get("status", {}).get("containerStatuses") or ()
    return statuses[0] if statuses else {}


def _terminated(pod: Obj) -> Obj | None:
    state = _container(pod).get("state") or {}
    return state.get("terminated")


def _waiting_error(pod: Obj) -> str:
    waiting = (_container(pod).get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason", "")
    if reason in IMAGE_ERRORS or reason in CONFIG_ERRORS:
        image = _container(pod).get("image") or pod.get("spec", {}).get("containers", [{}])[0].get("image", "")
        what = f"image {image}" if reason in IMAGE_ERRORS else "the container"
        return f"Kubernetes cannot start {what}: {reason}: {waiting.get('message', '').strip()}".rstrip(": ")
    return ""


def pod_state(name: str, pod: Obj) -> JobState:
    """One pod's state (a step's attempt, or one replica of a gang)."""
    status = pod.get("status", {})
    node = pod.get("spec", {}).get("nodeName")
    done = _terminated(pod)
    disrupted = condition(pod, DISRUPTION)
    if disrupted is not None and (done is not None or status.get("phase") in ("Succeeded", "Failed")):
        # evicted, preempted, its node gone: not the step's failure (the Job's FailJob rule agrees)
        why = f"{disrupted.get('reason', '')}: {disrupted.get('message', '')}".strip(": ")
        ended = epoch(done.get("finishedAt")) if done else None
        return JobState(name, running=False, exit_code=LOST_CODE, status="NODE_FAIL", node=node, reason=why,
                        node_failed=True, ended=ended)  # fmt: skip
    if done is not None:
        oom = done.get("reason") == "OOMKilled"
        code = int(done.get("exitCode", LOST_CODE))
        return JobState(
            name,
            running=False,
            exit_code=OOM_CODE if oom and code == 0 else code,
            status="OOMKilled" if oom else ("Succeeded" if code == 0 else done.get("reason") or "Failed"),
            node=node,
            reason=(done.get("message") or "").strip(),
            started=epoch(done.get("startedAt")),
            ended=epoch(done.get("finishedAt")),
        )
    error = _waiting_error(pod)
    if error:
        return JobState(name, running=False, exit_code=ERROR_CODE, status="Failed", node=node, reason=error)
    phase = status.get("phase", "Pending")
    if phase in ("Succeeded", "Failed"):  # no container status (kwok may leave it out): the phase says
        code = 0 if phase == "Succeeded" else LOST_CODE
        return JobState(name, running=False, exit_code=code, status=phase, node=node, reason=status.get("message", ""))
    if phase == "Running":
        running = (_container(pod).get("state") or {}).get("running") or {}
        if not running.get("startedAt"):  # the pod runs, its container not yet: still starting
            return JobState(name, running=True, exit_code=None, status="PENDING", node=node, reason="ContainerCreating")
        return JobState(
            name, running=True, exit_code=None, status="RUNNING", node=node, started=epoch(running.get("startedAt"))
        )
    scheduled = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None)
    waiting = (_container(pod).get("state") or {}).get("waiting") or {}
    if scheduled is not None and scheduled.get("status") == "False":
        reason = f"{scheduled.get('reason', '')}: {scheduled.get('message', '')}".strip(": ")
    else:  # never empty: a pending pod has not started (the runner counts a reasonless one as started now)
        reason = waiting.get("reason") or ("ContainerCreating" if node else "Pending: not scheduled yet")
    return JobState(name, running=True, exit_code=None, status="PENDING", node=node, reason=reason)


def job_state(name: str, job: Obj, pods: Sequence[Obj], pending_reason: str = "") -> JobState:
    """The attempt's state from its Job and the pods the Job controller made for it."""
    failed = condition(job, "Failed")
    if failed is not None and (failed.get("reason") == "PodFailurePolicy" and DISRUPTION in failed.get("message", "")):
        node = next((p.get("spec", {}).get("nodeName") for p in pods if p.get("spec", {}).get("nodeName")), None)
        return JobState(
            name,
            running=False,
            exit_code=LOST_CODE,
            status="NODE_FAIL",
            node=node,
            reason=failed.get("message", ""),
            node_failed=True,
        )
    states = [pod_state(name, p) for p in sorted(pods, key=_index)]
    if not states:
        if condition(job, "Complete") is not None:
            return JobState(name, running=False, exit_code=0, status="Succeeded")
        if failed is not None:
            return JobState(name, running=False, exit_code=LOST_CODE, status="Failed", reason=failed.get("message", ""))
        why = pending_reason or "Pending: no pod made yet"  # never empty: the runner would count it as started
        return JobState(name, running=True, exit_code=None, status="PENDING", reason=why)
    bad = [(i, s) for i, s in enumerate(states) if not s.running and s.exit_code != 0]
    if bad:
        index, first = min(bad, key=lambda b: b[1].ended or 0.0)
        if _completions(job) > 1:  # a gang: say which replica failed, as the other backends do
            why = f"replica {_index(sorted(pods, key=_index)[index])} ended with {first.exit_code}"
            first = replace(first, reason=f"{why}: {first.reason}" if first.reason else why)
        return first
    if all(not s.running for s in states) and (
        condition(job, "Complete") is not None or len(states) == _completions(job)
    ):
        return JobState(
            name,
            running=False,
            exit_code=0,
            status="Succeeded",
            node=states[0].node,
            started=min((s.started for s in states if s.started), default=None),
            ended=max((s.ended for s in states if s.ended), default=None),
        )
    running = [s for s in states if s.running]
    pending = [s for s in running if s.status == "PENDING"]
    if pending:
        return JobState(
            name, running=True, exit_code=None, status="PENDING", node=states[0].node, reason=pending[0].reason
        )
    first = running[0] if running else states[0]
    return JobState(name, running=True, exit_code=None, status="RUNNING", node=states[0].node, started=first.started)


def pods_usage(name: str, pods: Sequence[Obj]) -> Usage:
    """When the attempt's container ran and whether the OOM killer ended it, from its pod's
    status (peak memory and CPU time need the metrics API: unknown)."""
    done = [s for s in (pod_state(name, p) for p in pods) if not s.running]
    if not done:
        return Usage()
    first = done[0]
    return Usage(started=first.started, ended=first.ended, oom_killed=first.status == "OOMKilled")


def _index(pod: Obj) -> int:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    return int(annotations.get("batch.kubernetes.io/job-completion-index", 0))


def _completions(job: Obj) -> int:
    return int(job.get("spec", {}).get("completions") or 1)
