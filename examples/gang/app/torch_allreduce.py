"""A torchrun-style gang check with no torch: plain sockets and the environment that
torchrun (torch.distributed.run) gives each process.

    MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK

Rank 0 listens on MASTER_PORT; every other rank connects (retrying for up to 60 s,
since the replicas start in any order) and sends rank + 1; rank 0 sums and sends the
total back.  Every rank prints one line and exits 1 on a wrong sum or a bad env:

    rank 1/2 on HOST: allreduce sum = 3 (expected 3) ok
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping

CONNECT_FOR = 60.0
NAMES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")


class EnvError(Exception):
    pass


def read_env(env: Mapping[str, str]) -> dict[str, int | str]:
    """The torchrun variables, checked: all present, integers where they must be, and
    consistent (RANK < WORLD_SIZE, LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE)."""
    missing = [name for name in NAMES if not env.get(name)]
    if missing:
        raise EnvError(f"missing torchrun variables: {', '.join(missing)}")
    values: dict[str, int | str] = {"MASTER_ADDR": env["MASTER_ADDR"]}
    for name in NAMES[1:]:
        try:
            values[name] = int(env[name])
        except ValueError:
            raise EnvError(f"{name}={env[name]!r} is not an integer") from None
    rank, size = int(values["RANK"]), int(values["WORLD_SIZE"])
    local, local_size = int(values["LOCAL_RANK"]), int(values["LOCAL_WORLD_SIZE"])
    port, node = int(values["MASTER_PORT"]), int(values["NODE_RANK"])
    if size < 1 or not 0 <= rank < size:
        raise EnvError(f"RANK={rank} is not in 0..WORLD_SIZE-1 (WORLD_SIZE={size})")
    if local_size < 1 or local_size > size or not 0 <= local < local_size:
        raise EnvError(f"LOCAL_RANK={local} / LOCAL_WORLD_SIZE={local_size} do not fit WORLD_SIZE={size}")
    if not 0 <= node < size:
        raise EnvError(f"NODE_RANK={node} is not in 0..WORLD_SIZE-1")
    if not 1 <= port <= 65535:
        raise EnvError(f"MASTER_PORT={port} is not a port")
    return values


def _recv_int(conn: socket.socket) -> int:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            raise ConnectionError("peer closed the connection")
        data += chunk
    return int(data)


def _connect(addr: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_FOR
    while True:
        try:
            return socket.create_connection((addr, port), timeout=5)
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"could not reach {addr}:{port} within {CONNECT_FOR:.0f}s: {exc}") from exc
            time.sleep(0.5)


def allreduce(addr: str, port: int, rank: int, size: int, value: int) -> int:
    """Sum of every rank's value, through rank 0."""
    if size == 1:
        return value
    if rank == 0:
        with socket.create_server(("", port), backlog=size) as server:
            server.settimeout(CONNECT_FOR)
            peers = [server.accept()[0] for _ in range(size - 1)]
            total = value + sum(_recv_int(conn) for conn in peers)
            for conn in peers:
                with conn:
                    conn.sendall(f"{total}\n".encode())
            return total
    with _connect(addr, port) as conn:
        conn.settimeout(CONNECT_FOR)
        conn.sendall(f"{value}\n".encode())
        return _recv_int(conn)


def main() -> int:
    try:
        env = read_env(os.environ)
    except EnvError as exc:
        print(f"torch_allreduce: {exc}", file=sys.stderr)
        return 2
    rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    try:
        total = allreduce(str(env["MASTER_ADDR"]), int(env["MASTER_PORT"]), rank, size, rank + 1)
    except (OSError, ConnectionError, ValueError) as exc:
        print(f"rank {rank}/{size} on {socket.gethostname()}: allreduce failed: {exc}", file=sys.stderr)
        return 1
    expected = size * (size + 1) // 2
    verdict = "ok" if total == expected else "WRONG"
    print(f"rank {rank}/{size} on {socket.gethostname()}: allreduce sum = {total} (expected {expected}) {verdict}")
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
