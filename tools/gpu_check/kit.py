"""The kit (dry run): its MANIFEST.json and what a complete kit holds."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
import zipfile
from pathlib import Path

from .common import KIT_LIMIT, NEEDED_DEBS, NOT_THERE


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kit_files(kit: Path) -> list[Path]:
    skip = {"MANIFEST.json"}
    return sorted(
        p for p in kit.rglob("*") if p.is_file() and p.name not in skip and "dry-run" not in p.relative_to(kit).parts
    )


def write_manifest(kit: Path) -> None:
    files = {str(p.relative_to(kit)): {"sha256": _sha256(p), "size": p.stat().st_size} for p in kit_files(kit)}
    (kit / "MANIFEST.json").write_text(json.dumps({"files": files}, indent=1) + "\n")


def _wheel_name(path: Path) -> str:
    return re.sub(r"[-_.]+", "-", path.name.split("-")[0]).lower()


def _wheel_tags_ok(path: Path) -> bool:
    """Installable by CPython 3.12 on x86-64 Linux: pure, abi3, or a cp312 manylinux build."""
    tags = path.stem.split("-")[-3:]
    py, abi, plat = tags
    if plat == "any":
        return True
    return ("cp312" in py.split(".") or abi == "abi3") and "x86_64" in plat and ("manylinux" in plat or "linux" in plat)


def verify_kit(kit: Path) -> list[str]:
    """What is wrong with the kit folder (nothing: ready to carry)."""
    problems: list[str] = []
    if not kit.is_dir():
        return [f"no kit folder at {kit}: run `make gpu-kit` (it writes ./gpu-kit)"]
    manifest = kit / "MANIFEST.json"
    if not manifest.is_file():
        problems.append(f"{manifest} is missing: the kit was not finished; run `make gpu-kit` again")
    else:
        listed = json.loads(manifest.read_text()).get("files", {})
        for rel, meta in sorted(listed.items()):
            p = kit / rel
            if not p.is_file():
                problems.append(f"{rel}: listed in MANIFEST.json but missing")
            elif p.stat().st_size != meta["size"] or _sha256(p) != meta["sha256"]:
                problems.append(f"{rel}: differs from MANIFEST.json (changed after `make gpu-kit`)")
    total = sum(p.stat().st_size for p in kit_files(kit))
    if total > KIT_LIMIT:
        problems.append(f"the kit holds {total / 2**20:.1f} MiB; at most {KIT_LIMIT >> 20} MiB can be carried")
    wheels = sorted((kit / "wheels").glob("*.whl"))
    names = {_wheel_name(w) for w in wheels}
    hetflow = [w for w in wheels if _wheel_name(w) == "hetflow"]
    if not hetflow:
        problems.append("wheels/: no hetflow wheel")
    else:
        with zipfile.ZipFile(hetflow[0]) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            requires = [
                ln.split(":", 1)[1].strip()
                for ln in z.read(meta).decode().splitlines()
                if ln.startswith("Requires-Dist:")
            ]
        for req in requires:
            if "extra ==" in req:
                continue
            name = re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ ;\[(]", req, maxsplit=1)[0]).lower()
            if name not in names:
                problems.append(f"wheels/: hetflow needs {name} and the kit has no wheel of it")
    for w in wheels:
        if not _wheel_tags_ok(w):
            problems.append(f"wheels/{w.name}: not installable by CPython 3.12 on x86-64 Linux")
        if _wheel_name(w) in NOT_THERE:
            problems.append(f"wheels/{w.name}: not needed there; leave it out")
    if len({_wheel_name(w) for w in wheels}) != len(wheels):
        problems.append("wheels/: two versions of one package (pip would refuse to install both)")
    debs = {p.name.split("_")[0] for p in (kit / "debs").glob("*.deb")}
    for d in NEEDED_DEBS:
        if d not in debs:
            problems.append(f"debs/: no {d} .deb")
    image = kit / "image.oci.tar"
    if not image.is_file():
        problems.append("image.oci.tar is missing")
    else:
        try:
            with tarfile.open(image) as t:
                members = set(t.getnames())
            if not {"index.json", "oci-layout"} <= {m.lstrip("./") for m in members}:
                problems.append("image.oci.tar is not an OCI archive (no index.json / oci-layout)")
        except tarfile.TarError as exc:
            problems.append(f"image.oci.tar cannot be read: {exc}")
    for f in ("gpu-check", "check.cu", "sms.cu", "ckpt.cu"):
        if not (kit / f).is_file():
            problems.append(f"{f} is missing")
    problems += _criu_problems(kit)
    for module in sorted(p.name for p in Path(__file__).parent.glob("*.py")):  # the check's own, beside gpu-check
        if not (kit / "gpu_check" / module).is_file():
            problems.append(f"gpu_check/{module} is missing")
    return problems


# What CRIU 4.1.1 (``make criu``) links beyond glibc, as ``ldd`` names them on Debian 12:
# the checkpoint part runs it with these beside it (tools/gpu-kit/build carries them).
CRIU_LIBS = ("libprotobuf-c.so.1", "libnl-3.so.200", "libnet.so.1", "libnftables.so.1", "libgnutls.so.30")


def _criu_problems(kit: Path) -> list[str]:
    """The carried CRIU (the checkpoint part): kit/criu/criu and the libraries it needs."""
    criu = kit / "criu"
    if not (criu / "criu").is_file():
        return ["criu/criu is missing: `make criu` builds CRIU 4.1.1 and `make gpu-kit` carries it"]
    libs = {p.name for p in (criu / "lib").glob("*.so*")}
    return [f"criu/lib/{lib} is missing (CRIU needs it)" for lib in CRIU_LIBS if lib not in libs]
