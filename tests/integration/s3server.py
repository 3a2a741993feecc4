"""A real S3-compatible server on loopback for the tests: moto in server mode (its own
process, HTTP on 127.0.0.1), reached through s3fs/boto3 exactly as a user's endpoint is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.hfkit import free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "hetflow-test",
    "AWS_SECRET_ACCESS_KEY": "hetflow-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def container_reachable_address() -> str | None:
    """This machine's own address on its outward interface (not loopback), which a container on
    podman's bridge network reaches as the host reaches it; None without one.  A UDP socket's
    connect picks the interface and sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@contextmanager
def s3_server(log: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """Start moto_server listening on ``host`` (loopback unless a container must reach it);
    yields its endpoint URL."""
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(exe), "-H", host, "-p", str(port)], stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy()
        )
    url = f"http://{host}:{port}"
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"moto_server exited: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        else:
            raise RuntimeError("moto_server did not start in 30 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
