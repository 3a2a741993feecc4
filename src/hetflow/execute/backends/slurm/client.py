"""Slurm's client commands (sbatch, squeue, scontrol, sacct, scancel, sinfo), run with the
cluster's SLURM_CONF; failures become EngineErrors that say what to fix."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.slurm.queue import SQUEUE_FORMAT, TIME_FORMAT, QueueRow, engine_time, parse_squeue
from hetflow.execute.backends.slurm.settings import SlurmSettings

# What a user does when Slurm cannot be reached.  (It once named demo.slurm.cluster, a
# developer's test cluster that is not part of the installed package.)
HOW = (
    "point SLURM_CONF at the cluster's slurm.conf (or set slurm slurm_conf), make sure munged runs "
    "(systemctl start munge) with the cluster's key, and that slurmctld answers `scontrol ping`; "
    "docs/guides/clusters.md says what hetflow needs of the cluster"
)


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()
    return lines[-1]


class SlurmClient:
    def __init__(self, settings: SlurmSettings, env: Mapping[str, str] | None = None) -> None:
        self.bin_dir = settings.bin_dir
        self.env = dict(os.environ if env is None else env)
        if settings.slurm_conf:
            self.env["SLURM_CONF"] = settings.slurm_conf
        self._sacct: bool | None = None  # does accounting answer?

    def run(
        self, args: list[str], *, timeout: float = 60, check: bool = True, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``env``: set for this command only, over the client's."""
        command = str(Path(self.bin_dir) / args[0]) if self.bin_dir else args[0]
        try:
            proc = subprocess.run(
                [command, *args[1:]],
                capture_output=True,
                text=True,
                env={**self.env, **(env or {})},
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(f"{args[0]} did not answer within {timeout:.0f}s; is slurmctld up? ({HOW})") from None
        except OSError as exc:
            raise EngineError(
                f"cannot run {args[0]}: {exc.strerror}; install Slurm's client commands "
                "(apt-get install -y slurm-client) or set slurm bin_dir"
            ) from None
        if check and proc.returncode != 0:
            raise EngineError(f"{args[0]} failed: {last_line(proc)}")
        return proc

    def check(self) -> None:
        conf = self.env.get("SLURM_CONF")
        if conf and not Path(conf).is_file():
            # Slurm's clients retry for about a minute before saying so
            raise EngineError(f"SLURM_CONF names {conf}, which does not exist; {HOW}")
        proc = self.run(["sinfo", "--noheader", "--format=%P %a"], timeout=30, check=False)
        if proc.returncode != 0:
            raise EngineError(f"Slurm does not answer (sinfo: {last_line(proc)}); {HOW}")

    def squeue(self) -> list[QueueRow]:
        """Every job of this user that slurmctld remembers (MinJobAge after its end)."""
        proc = self.run(
            ["squeue", "--me", "--noheader", "--states=all", f"--format={SQUEUE_FORMAT}"], timeout=60, env=TIME_FORMAT
        )
        return parse_squeue(proc.stdout)

    def show_job(self, job_id: str) -> str | None:
        """``scontrol --oneliner show job``, or None when slurmctld no longer knows the job."""
        proc = self.run(["scontrol", "--oneliner", "show", "job", job_id], check=False)
        return proc.stdout if proc.returncode == 0 else None

    def accounting(self) -> bool:
        """Does sacct answer (slurmdbd runs)?  Asked once."""
        if self._sacct is None:
            self._sacct = self.run(["sacct", "-n", "-X", "-j", "1"], check=False).returncode == 0
        return self._sacct

    def sacct(self, job_id: str) -> str | None:
        """sacct's line for the job, or None without accounting (it needs slurmdbd)."""
        if not self.accounting():
            return None
        proc = self.run(["sacct", "-n", "-P", "-X", "-j", job_id, "--format=State,ExitCode,NodeList"], check=False)
        return proc.stdout if proc.returncode == 0 else None

    def sacct_times(self, job_id: str) -> tuple[float | None, float | None]:
        """Slurm's StartTime and EndTime of a job slurmctld has forgotten, from accounting;
        (None, None) without it (no slurmdbd)."""
        if not job_id or not self.accounting():
            return None, None
        proc = self.run(["sacct", "-n", "-P", "-X", "-j", job_id, "--format=Start,End"], check=False, env=TIME_FORMAT)
        start, _, end = proc.stdout.strip().partition("|")
        return (engine_time(start), engine_time(end)) if proc.returncode == 0 else (None, None)
