"""The end of ``make demo``: serve the dashboard over the runs the demo made, check that it
answers with them, and print its URL (and each run's page).

    python -m demo.ui [--port 8786]

The dashboard keeps serving in the background (its pid in $HETFLOW_HOME/ui.pid) so the URL
opens after make returns; running the demo again replaces it.  ``kill $(cat .hetflow/ui.pid)``
stops it.  It binds 127.0.0.1 only, so it needs no token.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from hetflow.config import hetflow_home


def _stop_previous(pid_file: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        pid = int(Path(pid_file).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"hetflow.cli.main" in cmdline and b"ui" in cmdline:
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                if not os.path.exists(f"/proc/{pid}"):
                    break
                time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8786)
    args = parser.parse_args()
    home = hetflow_home()
    pid_file = str(home / "ui.pid")
    _stop_previous(pid_file)
    with (home / "ui.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hetflow.cli.main", "ui", "--port", str(args.port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    with open(pid_file, "w") as f:
        f.write(str(proc.pid))
    url = f"http://127.0.0.1:{args.port}/"
    page: dict[str, Any] = {}
    for _ in range(100):
        if proc.poll() is not None:
            print(f"the dashboard did not start: see {home / 'ui.log'}", file=sys.stderr)
            return 1
        try:
            page = httpx.get(url + "api/runs?limit=8", timeout=2).raise_for_status().json()
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        print(f"the dashboard did not answer on {url}: see {home / 'ui.log'}", file=sys.stderr)
        return 1
    print(f"== the dashboard lists {page['total']} run(s), newest first (pid {proc.pid}; stop: kill $(cat {pid_file}))")
    for run in page["runs"]:
        print(f"   {run['name']:<14} {run['state']:<10} {url}#/runs/{run['id']}")
    print(f"hetflow ui: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
