"""A proxy in front of ``FakeRegistry``, in a process of its own, for load tests and the
bench (``tests/integration/test_registry_abuse.py``, ``python -m bench.proxy.registry``):
its memory is then the process's, measured from outside (``/proc/PID/status``).

    python -m hetflow.registry.fakes.fakeproxy STATE_DIR [--blob NAME=BYTES ...] [--per-client N]
                                         [--big-indexes COUNT:BYTES] [--big-views COUNT:BYTES]
                                         [--trickle N [--trickle-every S]]
                                         [--limit KEY=VALUE ...]

prints one JSON line, ``{"url", "pid", "machine_type", "token", "repo", "blobs": {NAME:
digest}, "indexes": {"repo", "tags"}}``, once the proxy accepts connections, warms the
blob cache with every blob, and serves until its stdin closes.  ``--big-indexes`` adds
COUNT generated indexes of about BYTES each that fit no build of the machine type
(``hetflow.registry.fakes.fakeindexes``); ``--big-views`` COUNT indexes whose one generic build
fits it, with an index annotation of about BYTES (``"views"``: their repo and tags).
``--trickle N`` adds N blobs of 64 KiB (``"trickle"``:
their digests) that the upstream, then a real server on loopback (``"upstream"``), sends a
byte every ``--trickle-every`` seconds (``hetflow.registry.fakes.trickle``); ``--limit`` sets any
other field of ``Limits``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import httpx

from hetflow.registry.fakes.fake import FakeRegistry
from hetflow.registry.fakes.fakeindexes import BigIndexes
from hetflow.registry.fakes.trickle import TrickleUpstream
from hetflow.registry.server.serving import start_in_thread
from hetflow.registry.settings import Limits, MachineTypeDecl, Settings

__all__ = ["REPO", "main"]

REPO = "load/app"
MACHINE_TYPE = "x86-64-v2"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hetflow.registry.fakes.fakeproxy")
    parser.add_argument("state", type=Path)
    parser.add_argument("--blob", action="append", default=[], help="NAME=BYTES: a blob of random bytes")
    parser.add_argument("--per-client", type=int, default=Limits().max_requests_per_client)
    parser.add_argument("--max-connections", type=int, default=Limits().max_connections)
    parser.add_argument("--big-indexes", default="0:0", help="COUNT:BYTES: generated indexes no build of which fits")
    parser.add_argument("--big-views", default="0:0", help="COUNT:BYTES: generated indexes whose one build fits")
    parser.add_argument("--trickle", type=int, default=0, help="N blobs the upstream sends a byte a time (loopback)")
    parser.add_argument("--trickle-every", type=float, default=1.0, help="seconds between their bytes")
    parser.add_argument("--limit", action="append", default=[], help="KEY=VALUE: any other field of Limits")
    args = parser.parse_args(argv)
    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    blobs = {}
    for spec in args.blob:
        name, _, size = spec.partition("=")
        blobs[name] = fake.add_blob(os.urandom(int(size)))
    trickled = [fake.add_blob(os.urandom(64 * 1024)) for _ in range(args.trickle)]
    extra = dict(spec.partition("=")[::2] for spec in args.limit)
    count, _, size = args.big_indexes.partition(":")
    big = BigIndexes("load/big", int(count), int(size or 0))
    count, _, size = args.big_views.partition(":")
    views = BigIndexes("load/views", int(count), int(size or 0), fitting=True)
    transport = httpx.MockTransport(views.handler(big.handler(lambda request: fake.handle(request))))
    upstream = "http://upstream.test"
    if args.trickle:  # a real loopback upstream: the proxy's sockets and timeouts are under test
        slow = TrickleUpstream(transport.handle_request, trickle=trickled, every_s=args.trickle_every)
        upstream = slow.start()
    settings = Settings(
        upstream=upstream,
        state_dir=args.state,
        machine_types=(MachineTypeDecl(profile=MACHINE_TYPE),),
        limits=Limits.model_validate(
            {"max_requests_per_client": args.per_client, "max_connections": args.max_connections, **extra}
        ),
    )
    proxy = start_in_thread(settings, transport=None if args.trickle else transport)
    token = (args.state / "tokens" / MACHINE_TYPE).read_text().strip()
    with httpx.Client(base_url=proxy.url, timeout=60) as client:
        bearer = client.get("/token", auth=(MACHINE_TYPE, token)).json()["token"]
        for digest in blobs.values():  # into the cache: what follows measures cached reads
            client.get(f"/v2/{REPO}/blobs/{digest}", headers={"Authorization": f"Bearer {bearer}"}).raise_for_status()
    info = {
        "url": proxy.url,
        "pid": os.getpid(),
        "front_pid": proxy.front_pid,  # HAProxy, the HTTP front: its memory is the proxy's too
        "machine_type": MACHINE_TYPE,
        "token": token,
        "repo": REPO,
        "blobs": blobs,
        "indexes": {"repo": big.repo, "tags": big.tags},
        "views": {"repo": views.repo, "tags": views.tags},
        "upstream": upstream,
        "trickle": trickled,
    }
    print(json.dumps(info), flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or exits)
    proxy.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
