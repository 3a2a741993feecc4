"""Who is on the other end of a loopback connection: the local user (UID) that owns the
client's socket, read from the kernel's socket table, as identd does (RFC 1413).

An open proxy (loopback, no admin token) lets this machine's users register hardware; the
tokens each registers are counted against the user, not the address (every local client is
127.0.0.1, and any of them may bind 127.0.0.2 as well).  ``/proc/net/tcp`` and ``tcp6`` list
each socket of this network namespace with its local and remote address and its owner's UID
(proc(5)); the client's socket is the one whose local address is the client's and whose
remote address is ours.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

__all__ = ["holder_of", "peer_uid"]

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def _hex_address(host: str, port: int, width: int) -> str | None:
    """``host:port`` as /proc/net/tcp writes it: the address as 32-bit words in host byte
    order (little-endian on every Linux hetflow runs on), the port in hex."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if width == 32 and isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            return None
        ip = ip.ipv4_mapped
    if width == 128 and isinstance(ip, ipaddress.IPv4Address):
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")  # an IPv4 client of a dual-stack socket
    raw = ip.packed
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return f"{words.hex().upper()}:{port:04X}"


def peer_uid(client: tuple[str, int], server: tuple[str, int], tables: tuple[Path, ...] = _TABLES) -> int | None:
    """The UID owning the local socket ``client`` connected to ``server``; None when it is
    not found (another machine, another network namespace, no /proc)."""
    for table, width in zip(tables, (32, 128), strict=False):
        local, remote = _hex_address(*client, width), _hex_address(*server, width)
        if local is None or remote is None:
            continue
        try:
            lines = table.read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                return int(fields[7])
    return None


def holder_of(client: tuple[str, int] | None, server: tuple[str, int] | None) -> str:
    """Who registers: ``uid:N`` for a local user, else ``address:HOST`` (or ``unknown``)."""
    if client is None:
        return "unknown"
    if server is not None:
        uid = peer_uid(client, server)
        if uid is not None:
            return f"uid:{uid}"
    return f"address:{client[0]}"
