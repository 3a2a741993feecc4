"""gpu-check's command line: the dry run here, the parts there, the report and exit status."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .checkpoint import part_checkpoint
from .common import PARTS, TITLE, WORK, Part
from .discovery import part_discovery
from .gang import part_gang
from .injection import part_injection
from .kit import verify_kit, write_manifest
from .leases import part_leases
from .machine import Machine, timed
from .report import markdown, overall
from .sharing import part_sharing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-check", description=TITLE)
    ap.add_argument("outdir", nargs="?", help="folder for gpu-check.json, gpu-check.md and raw outputs")
    ap.add_argument(
        "--kit", default=None, help="the folder `make gpu-kit` made (default: this script's folder, or ./gpu-kit)"
    )
    ap.add_argument("--dry-run", action="store_true", help="verify the kit folder here; run nothing on a GPU")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}")
    ap.add_argument("--write-manifest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parent.parent  # the gpu-check script's folder: this package sits beside it
    kit = (
        Path(args.kit)
        if args.kit
        else (here if (here / "MANIFEST.json").is_file() or (here / "wheels").is_dir() else Path("gpu-kit"))
    )
    if args.write_manifest:
        write_manifest(kit)
        return 0
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS]
    if bad:
        print(f"gpu-check: --parts: unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}", file=sys.stderr)
        return 2
    if not args.outdir and not args.dry_run:
        print("gpu-check: give OUTDIR, the folder for gpu-check.json and gpu-check.md (or --dry-run)", file=sys.stderr)
        return 2
    out = Path(args.outdir or (kit / "dry-run"))
    if out.exists() and not out.is_dir():
        print(f"gpu-check: OUTDIR {out} is a file; give a folder", file=sys.stderr)
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"gpu-check: cannot make OUTDIR {out}: {exc.strerror}", file=sys.stderr)
        return 2
    uname = os.uname()
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "mode": "dry-run" if args.dry_run else "gpu",
        "device": {"kernel": uname.release, "os": _os_name(), "machine": uname.machine},
        "parts": [],
    }
    results: list[Part] = []
    if args.dry_run:
        problems = verify_kit(kit)
        p = Part(
            "kit",
            "failed" if problems else "passed",
            summary=f"{kit}: " + ("; ".join(problems) if problems else "complete, manifest matches, under 64 MiB"),
        )
        results.append(p)
        results += [Part(x, "skipped", summary="dry run: needs the GPU machine") for x in parts]
    else:
        if os.geteuid() != 0:
            print("gpu-check: run as root (it unpacks podman and runs containers)", file=sys.stderr)
            return 2
        problems = verify_kit(kit)
        if problems:
            print("gpu-check: the kit is not complete: " + "; ".join(problems), file=sys.stderr)
            return 2
        WORK.mkdir(parents=True, exist_ok=True)
        m = Machine(kit, out)
        makers = {
            "discovery": part_discovery,
            "injection": part_injection,
            "sharing": part_sharing,
            "leases": part_leases,
            "gang": part_gang,
            "checkpoint": part_checkpoint,
        }
        for name in parts:
            p = timed(Part(name), makers[name](m, report))
            print(f"gpu-check: {name}: {p.status} ({p.seconds:.1f} s) {p.summary or p.error}", flush=True)
            results.append(p)
    report["parts"] = [asdict(p) for p in results]
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "gpu-check.md").write_text(markdown(report))
    print(markdown(report))
    return overall(results) if not args.dry_run else (0 if results[0].status == "passed" else 1)


def _os_name() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "?"
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)', text, re.M)
    return m.group(1) if m else "?"
