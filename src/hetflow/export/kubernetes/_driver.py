"""The driver: a Job whose POSIX sh script releases each suspended step Job once its parents'
outputs are accepted, and the ServiceAccount, Role and RoleBinding that let it."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Collection, Mapping, Sequence

from hetflow.export.kubernetes._common import (
    DRIVER_FAILED_EXIT,
    STAGING_ATTEMPT,
    WORK_MOUNT,
    Context,
    Obj,
    run_volumes,
    small_resources,
)
from hetflow.kube import MANAGED_BY, container_security, pod_security
from hetflow.spec import Workflow


def driver_access(ctx: Context, jobs: list[str], mpijobs: Sequence[str] = ()) -> list[Obj]:
    """The driver's ServiceAccount, Role and RoleBinding: list the run's Jobs (and MPIJobs,
    when it has gang steps with ``launcher: mpi``) and patch exactly those."""
    labels = ctx.run_labels("driver")
    rules: list[Obj] = [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
        # RBAC cannot limit list by name, but it can limit patch: only this run's Jobs.
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"], "resourceNames": jobs},
    ]
    if mpijobs:
        rules += [
            {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": ["kubeflow.org"],
                "resources": ["mpijobs"],
                "verbs": ["patch"],
                "resourceNames": list(mpijobs),
            },
        ]
    subject: Obj = {"kind": "ServiceAccount", "name": ctx.driver}
    if ctx.namespace is not None:
        subject["namespace"] = ctx.namespace  # else the RoleBinding's own namespace
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ctx.meta(ctx.driver, labels)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": ctx.meta(ctx.driver, labels),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": ctx.meta(ctx.driver, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ctx.driver},
            "subjects": [subject],
        },
    ]


def driver_job(
    ctx: Context,
    order: list[str],
    jobs: Mapping[str, str],
    parents: Mapping[str, list[str]],
    skipped: list[str],
    poll_seconds: int,
    mpi: Collection[str] = frozenset(),
) -> Obj:
    labels = ctx.run_labels("driver")
    annotations = {}
    if skipped:
        annotations["hetflow.skipped"] = "optional, fits no node class: " + ", ".join(skipped)
    container = {
        "name": "driver",
        "image": ctx.tools,
        "command": ["sh", "-c", driver_script(ctx.run_id, order, jobs, parents, ctx.workflow, mpi)],
        "env": [
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "HETFLOW_WORKDIR", "value": posixpath.join(WORK_MOUNT, ctx.paths.workdir.as_posix())},
            {"name": "HETFLOW_POLL_SECONDS", "value": str(poll_seconds)},
            {"name": "HOME", "value": "/tmp"},  # kubectl's cache; the root is read-only
        ],
        "resources": small_resources(),
        "securityContext": container_security(),
        "volumeMounts": [{"name": "work", "mountPath": WORK_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": ctx.meta(ctx.driver, labels, annotations),
        "spec": {
            "backoffLimit": 3,  # a lost node or an API hiccup; the driver resumes from the Jobs' state
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",  # a step failed: retrying the driver changes nothing
                        "onExitCodes": {
                            "containerName": "driver",
                            "operator": "In",
                            "values": [DRIVER_FAILED_EXIT],
                        },
                    }
                ]
            },
            "template": {
                "metadata": {"labels": {**MANAGED_BY, **labels}},
                "spec": {
                    "serviceAccountName": ctx.driver,
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "securityContext": pod_security(ctx.uid, ctx.gid),
                    "containers": [container],
                    "volumes": run_volumes(ctx),
                },
            },
        },
    }


_DRIVER = r"""# hetflow run @RUN@: un-suspend each step's Job once all its parents' outputs are accepted.
set -u
W="$HETFLOW_WORKDIR"
POLL="${HETFLOW_POLL_SECONDS:-10}"
SEL='hetflow.run=@RUN@,hetflow.role=step'
FMT='{range .items[*]}{.metadata.name}{" suspend="}{.spec.suspend}'
FMT="$FMT"'{" conditions="}{.status.conditions[?(@.status=="True")].type}{"\n"}{end}'
@MPI_FMT@
# accept STEP OUTPUT...: check the declared outputs, then rename the attempt into place.
accept() {
  s=$1
  shift
  stage="$W/attempts/$s/@ATTEMPT@/out"
  final="$W/steps/$s/out"
  if [ ! -d "$stage" ] && [ -d "$final" ]; then
    : > "$W/steps/$s/done"
    return 0
  fi
  missing=""
  for o in "$@"; do
    [ -e "$stage/$o" ] || missing="$missing $o"
  done
  if [ -n "$missing" ]; then
    echo "step $s exited 0 but did not write:$missing" > "$W/steps/$s/failed"
    cat "$W/steps/$s/failed"
    return 1
  fi
  rm -rf "$final" && mv "$stage" "$final" && : > "$W/steps/$s/done" || return 1
  rmdir "$W/attempts/$s/@ATTEMPT@" 2> /dev/null
  echo "step $s done"
}

# step STEP JOB 'PARENT...' OUTPUT...: one look at one step.
step() {
  s=$1
  j=$2
  parents=$3
  shift 3
  [ -e "$W/steps/$s/done" ] && return 0
  if [ -e "$W/steps/$s/failed" ]; then
    FAILED="$FAILED $s"
    return 0
  fi
  line=$(printf '%s\n' "$ST" | grep "^$j " || true)
  case "$line" in
    @DONE@)
      accept "$s" "$@" || FAILED="$FAILED $s"
      return 0
      ;;
    *" conditions="*Failed*)
      echo "step $s failed; see kubectl logs job/$j" > "$W/steps/$s/failed"
      cat "$W/steps/$s/failed"
      FAILED="$FAILED $s"
      return 0
      ;;
  esac
  for p in $parents; do
    case " $FAILED $BLOCKED " in
      *" $p "*)
        BLOCKED="$BLOCKED $s"
        return 0
        ;;
    esac
  done
  ACTIVE=$((ACTIVE + 1))
  case "$line" in
    *" suspend=true "*) ;;
    *) return 0 ;;
  esac
  for p in $parents; do
    [ -e "$W/steps/$p/done" ] || return 0
  done
@RELEASE@
}

for s in @ALL@; do
  mkdir -p "$W/steps/$s" "$W/attempts/$s" || exit 1
done
while :; do
  if ! ST=$(kubectl -n "$NS" get jobs -l "$SEL" -o "jsonpath=$FMT"@GET_MPI@); then
    sleep "$POLL"
    continue
  fi
  FAILED=""
  BLOCKED=""
  ACTIVE=0
@STEPS@
  if [ "$ACTIVE" -eq 0 ]; then
    if [ -n "$FAILED" ]; then
      echo "run @RUN@ failed:$FAILED"
      [ -z "$BLOCKED" ] || echo "not started, as a step before them failed:$BLOCKED"
      exit @FAILED_EXIT@
    fi
    echo "run @RUN@: all @COUNT@ steps done"
    exit 0
  fi
  sleep "$POLL"
done
"""


# The pieces that differ when the run has MPIJobs (kubeflow mpi-operator): they are listed
# with `get mpijobs`, released by patching spec.runPolicy.suspend, and done when their
# Succeeded condition is True (a Job's is Complete).  A run without them gets the script
# as it always was.
_JOB_ONLY = {
    "@MPI_FMT@": "",
    "@GET_MPI@": "",
    "@DONE@": '*" conditions="*Complete*',
    "@RELEASE@": (
        """  kubectl -n "$NS" patch job "$j" --type=merge -p '{"spec":{"suspend":false}}' > /dev/null"""
        ' && echo "step $s started"'
    ),
}
_WITH_MPI = {
    "@MPI_FMT@": (
        """MFMT='{range .items[*]}{.metadata.name}{" suspend="}{.spec.runPolicy.suspend}'\n"""
        """MFMT="$MFMT"'{" conditions="}{.status.conditions[?(@.status=="True")].type}{"\\n"}{end}'\n"""
        "MPIJOBS=' @MPIJOBS@ '\n"
    ),
    "@GET_MPI@": ' && echo && kubectl -n "$NS" get mpijobs -l "$SEL" -o "jsonpath=$MFMT"',
    "@DONE@": '*" conditions="*Complete* | *" conditions="*Succeeded*',
    "@RELEASE@": (
        '  case "$MPIJOBS" in\n'
        """    *" $j "*) kubectl -n "$NS" patch mpijob "$j" --type=merge"""
        """ -p '{"spec":{"runPolicy":{"suspend":false}}}' > /dev/null ;;\n"""
        """    *) kubectl -n "$NS" patch job "$j" --type=merge -p '{"spec":{"suspend":false}}' > /dev/null ;;\n"""
        '  esac && echo "step $s started"'
    ),
}


def driver_script(
    run_id: str,
    order: Sequence[str],
    jobs: Mapping[str, str],
    parents: Mapping[str, Sequence[str]],
    wf: Workflow,
    mpi: Collection[str] = frozenset(),
) -> str:
    """The driver's POSIX sh program: steps in topological order, each released when its
    parents are accepted.  Reads $NS, $HETFLOW_WORKDIR and $HETFLOW_POLL_SECONDS.  Steps
    in ``mpi`` are MPIJobs, the others Jobs."""
    calls = [
        "  step "
        + " ".join(
            [shlex.quote(s), shlex.quote(jobs[s]), shlex.quote(" ".join(parents[s]))]
            + [shlex.quote(posixpath.normpath(o)) for o in wf.steps[s].outputs]
        )
        for s in order
    ]
    text = _DRIVER
    for key, value in (_WITH_MPI if mpi else _JOB_ONLY).items():
        text = text.replace(key, value)
    return (
        text.replace("@MPIJOBS@", " ".join(sorted(jobs[s] for s in mpi)))
        .replace("@RUN@", run_id)
        .replace("@ATTEMPT@", str(STAGING_ATTEMPT))
        .replace("@ALL@", " ".join(shlex.quote(s) for s in order))
        .replace("@STEPS@", "\n".join(calls))
        .replace("@COUNT@", str(len(order)))
        .replace("@FAILED_EXIT@", str(DRIVER_FAILED_EXIT))
    )
