"""The job script's last act before it ends 0: it moves the step's outputs into place itself
(``base.Publish``, issue 30).

Slurm starts a dependant (``--dependency=afterok``) as soon as this job ends, and hetflow sees
that end only on its next poll: were the outputs left in the attempt's /out for the executor
to rename (``execute.data.outputs.accept_outputs``), the dependant's podman would find no
``steps/PARENT/out/FILE`` to mount ("statfs ...: no such file or directory").  So, after the
container (a gang: every replica) exited 0, the script checks that every declared output is
under /out (the attempt's staging folder), then renames it to the step's folder on the same
file system (``mv -T``: rename(2), atomic), an old one moved aside first and removed after,
exactly as ``accept_outputs`` does.  The executor then finds staging gone and the outputs in
place, and only verifies and hashes them.

Only the accepted attempt writes (issue 37, ``execute.data.fencing``): the rename happens only
while the step's fencing token names this job's attempt, read under the step's lock (flock(1)
on ``steps/STEP/fence.lock``, which the executor takes to change the token), and the old
outputs' removal is done under it too, so the check and the rename are one act.  A job whose
node lost only its slurmd (the job and its container live on while hetflow runs the step again
elsewhere) may end long after a later attempt was accepted: its rename is refused, its /out
stays in its own folder, marked ``discarded`` for the executor to record, and it ends
``DISCARDED_CODE``.

A declared output missing, or a rename refused: the script prints why into the step's log (a
CRI record, ``hetflow: exited 0 but did not write declared output(s) X under /out``, the words
the executor uses on every backend), leaves /out as it is and ends ``PUBLISH_FAILED_CODE``, not
0, so Slurm never starts a dependant on missing inputs (``--kill-on-invalid-dep`` drops it).
POSIX sh, coreutils (``mv -T``, ``rm``, ``rmdir``, ``dirname``, ``cat``) and util-linux's
flock(1); every path quoted.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from hetflow.execute.backends.base import DISCARDED_CODE, PUBLISH_FAILED_CODE, Job
from hetflow.execute.data import fencing

_PUBLISH = """# The outputs go into place before the job ends 0: Slurm starts a dependant as soon as the
# job ends, before hetflow has seen it end (hetflow.execute.backends.slurm.script.publish); and only
# while the step's fencing token names this attempt, read under the step's lock with the rename
# (hetflow.execute.data.fencing), so a late attempt never replaces an accepted one's outputs.
if [ "$code" = 0 ]; then
  pstage={staging}; pfinal={final}; plog={log}; pfence={fence}; pmark={mark}
  psay() {{ printf '%s stderr F hetflow: %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%N+00:00)" "$*" >> "$plog"; }}
  missing=""
{checks}  if [ -n "$missing" ]; then
    psay "exited 0 but did not write declared output(s) $missing under /out"; finish {failed}
  fi
  mkdir -p -- "$(dirname -- "$pfinal")"
  pdone=unlocked; pheld=""
  {{
    if flock -x 9; then
      pheld=$(cat -- "$pfence" 2>/dev/null)
      case "$pheld" in ''|*[!0-9]*) pheld="" ;; esac  # no token: no attempt was granted one
      if [ -n "$pheld" ] && [ "$pheld" != {attempt} ]; then
        pdone=discarded
      elif rm -rf -- "$pfinal.old" && {{ [ ! -e "$pfinal" ] || mv -T -- "$pfinal" "$pfinal.old"; }} \\
          && mv -T -- "$pstage" "$pfinal"; then
        rm -rf -- "$pfinal.old"; pdone=moved
      else
        pdone=failed
      fi
    fi
  }} 9>>{lock}
  case "$pdone" in
    moved) rmdir -- "$(dirname -- "$pstage")" 2>/dev/null ;;  # the attempt's folder, when nothing else is left there
    discarded)
      pwho="attempt $pheld holds the step"
      if [ "$pheld" = {nobody} ]; then pwho="hetflow had given the attempt up"; fi
      pwhy="attempt {attempt} ended after $pwho: its outputs were discarded (fencing)"
      psay "$pwhy"; printf '%s\\n' "$pwhy" > "$pmark"; finish {discarded} ;;
    unlocked) psay "could not take the step's lock ({lock_said}) to move /out into place"; finish {failed} ;;
    *) psay "could not move /out into place ($pfinal)"; finish {failed} ;;
  esac
fi
"""


def publish_script(job: Job) -> str:
    """The bash that publishes ``job``'s outputs once ``$code`` is 0 (it calls the script's
    ``finish CODE``); empty when the job does not publish (``Job.publish`` None)."""
    p = job.publish
    if p is None:
        return ""
    q = shlex.quote
    checks = "".join(f'  [ -e "$pstage"/{q(o)} ] || missing="${{missing:+$missing, }}"{q(o)}\n' for o in p.declared)
    final = Path(p.final)
    return _PUBLISH.format(
        staging=q(p.staging),
        final=q(p.final),
        log=q(job.container.log_path or os.devnull),
        fence=q(str(fencing.fence_file(final))),
        lock=q(str(fencing.lock_file(final))),
        lock_said=fencing.lock_file(final).name,
        mark=q(str(fencing.discarded_file(Path(p.staging)))),
        attempt=int(job.attempt),
        nobody=fencing.NOBODY,
        checks=checks,
        failed=PUBLISH_FAILED_CODE,
        discarded=DISCARDED_CODE,
    )
