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

A declared output missing, or a rename refused: the script prints why into the step's log (a
CRI record, ``hetflow: exited 0 but did not write declared output(s) X under /out``, the words
the executor uses on every backend), leaves /out as it is and ends ``PUBLISH_FAILED_CODE``, not
0, so Slurm never starts a dependant on missing inputs (``--kill-on-invalid-dep`` drops it).
POSIX sh and coreutils only (``mv -T``, ``rm``, ``rmdir``, ``dirname``); every path quoted.
"""

from __future__ import annotations

import os
import shlex

from hetflow.execute.backends.base import PUBLISH_FAILED_CODE, Job

_PUBLISH = """# The outputs go into place before the job ends 0: Slurm starts a dependant as soon as the
# job ends, before hetflow has seen it end (hetflow.execute.backends.slurm.publish).
if [ "$code" = 0 ]; then
  pstage={staging}; pfinal={final}; plog={log}
  psay() {{ printf '%s stderr F hetflow: %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%N+00:00)" "$*" >> "$plog"; }}
  missing=""
{checks}  if [ -n "$missing" ]; then
    psay "exited 0 but did not write declared output(s) $missing under /out"; finish {failed}
  fi
  if ! {{ mkdir -p -- "$(dirname -- "$pfinal")" && rm -rf -- "$pfinal.old" \\
      && {{ [ ! -e "$pfinal" ] || mv -T -- "$pfinal" "$pfinal.old"; }} && mv -T -- "$pstage" "$pfinal"; }}; then
    psay "could not move /out into place ($pfinal)"; finish {failed}
  fi
  rm -rf -- "$pfinal.old"
  rmdir -- "$(dirname -- "$pstage")" 2>/dev/null  # the attempt's folder, when nothing else is left there
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
    return _PUBLISH.format(
        staging=q(p.staging),
        final=q(p.final),
        log=q(job.container.log_path or os.devnull),
        checks=checks,
        failed=PUBLISH_FAILED_CODE,
    )
