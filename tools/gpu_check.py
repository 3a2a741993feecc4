#!/usr/bin/env python3
"""hetflow on a real GPU: the acceptance check (README "On a real GPU").

There, as root, from the folder `make gpu-kit` made (carried to a bare GPU machine):

    python3 gpu-kit/gpu-check OUTDIR [--parts discovery,injection,sharing,gang] [--budget 420]

Here: `tools/gpu-check --dry-run [--kit gpu-kit] [OUTDIR]` verifies the kit folder.

Four parts, each passed, failed (with the error) or skipped (with why):
  discovery  `hetflow nodes --json` and `--topo` against the real NVML, field by field
             against what nvidia-smi prints;
  injection  the carried podman runs a workflow through `hetflow run`: a GPU step runs a
             CUDA program (built here with nvcc, CUDA runtime linked statically) in a
             hardened container that sees only its GPU's nodes, the control nodes and the
             driver's libraries hetflow injects; a CPU step of the same run sees no GPU; the
             run record holds the GPU step's NVML-sampled use.  Where containers cannot run,
             the same program runs as a plain process with hetflow's GPU variables;
  sharing    1, 2 and 4 processes of the same CUDA loop on one GPU at once (time-slicing,
             and MPS when nvidia-cuda-mps-control is there): the slowdown ``s`` of
             ``solo x (1 + s x (load - 1))`` fitted by hetflow's ``learn_slowdown``, beside
             the model's default; written to OUTDIR/slowdown.json for `hetflow profile slowdown`;
  gang       two ranks with the environment hetflow gives a torch gang (``replica_env``) do
             an all-reduce of a known tensor (NCCL; gloo where NCCL refuses two ranks on one GPU).

Writes OUTDIR/gpu-check.json and OUTDIR/gpu-check.md (and each part's raw output); exits 0
only if every part that ran passed.  It runs its own podman: on a machine whose own podman
runs containers, both would share one lock segment (/dev/shm/libpod_lock); the GPU machines
it is made for are bare.  Standard library only: it runs before hetflow is
installed (it installs the kit's wheels into a private folder first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PARTS = ("discovery", "injection", "sharing", "leases", "gang")
KIT_LIMIT = 64 << 20  # what the GPU machine's tool carries
DEFAULT_SLOWDOWN = 0.966  # hetflow's model default (inventory.DEFAULT_TIMESLICE_SLOWDOWN)
IMAGE = "localhost/hetflow-kit/minimal:1"
# What podman needs from the kit (their libraries ride along; tools/gpu-kit/build lists them).
NEEDED_DEBS = ("podman", "conmon", "runc", "libgpgme11", "libseccomp2", "libsubid4", "libglib2.0-0")
NOT_THERE = ("ray",)  # hetflow extras a GPU machine has no use for: never carried
WORK = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/hetflow-gpu-check"))


class CheckError(Exception):
    """A part's failure with a message that says what failed."""


@dataclass
class Part:
    name: str
    status: str = "skipped"  # passed | failed | skipped
    seconds: float = 0.0
    summary: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    error: str = ""


# --- discovery: hetflow vs nvidia-smi ---------------------------------------------------------

QUERY = "index,uuid,name,memory.total,compute_cap,driver_version,mig.mode.current,pci.bus_id"


def parse_query(text: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` rows."""
    keys = QUERY.split(",")
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(keys):
            rows.append(dict(zip(keys, values, strict=True)))
    return rows


def parse_smi_xml(text: str) -> dict[str, Any]:
    """From `nvidia-smi -q -x`: the CUDA version and each GPU's architecture, by UUID."""
    root = ET.fromstring(text)
    gpus = {}
    for g in root.findall("gpu"):
        gpus[(g.findtext("uuid") or "").strip()] = {"architecture": (g.findtext("product_architecture") or "").strip()}
    return {"cuda_version": (root.findtext("cuda_version") or "").strip(), "gpus": gpus}


def parse_topo(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m`: each GPU's CPU and NUMA affinity and its links to the others."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the header is underlined with escapes
    lines = [ln for ln in text.splitlines() if ln.strip()]
    head = next((ln for ln in lines if "CPU Affinity" in ln), None)
    if head is None:
        return {"gpus": {}}
    cols = [c.strip() for c in head.strip().split("\t") if c.strip()]
    gpu_cols = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    out: dict[str, Any] = {}
    for ln in lines[lines.index(head) + 1 :]:
        cells = [c.strip() for c in ln.split("\t")]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        cells = [c for c in cells[1:] if c != ""] if len(cells) > 1 else []
        links = dict(zip(gpu_cols, cells[: len(gpu_cols)], strict=False))  # a short row: fewer links
        rest = cells[len(gpu_cols) :]
        out[ln.split("\t")[0].strip()] = {
            "links": {k: v for k, v in links.items() if v != "X"},
            "cpu_affinity": rest[0] if rest else "",
            "numa_affinity": rest[1] if len(rest) > 1 else "",
        }
    return {"gpus": out}


def _mib(n: Any) -> str:
    return str(int(n) >> 20) if isinstance(n, (int, float)) else ""


def _numa(v: Any) -> str:
    return "" if v is None or str(v) in ("N/A", "-1") else str(v)


def compare_discovery(
    node: dict[str, Any], query: list[dict[str, str]], xml: dict[str, Any], topo: dict[str, Any]
) -> list[dict[str, Any]]:
    """One row per (GPU, field): what hetflow says, what nvidia-smi says, whether they agree.
    ``strict`` rows decide the part; the others are shown (a difference there is a finding)."""
    rows: list[dict[str, Any]] = []
    by_uuid = {g.get("uuid"): g for g in node.get("gpus", [])}
    if len(by_uuid) != len(query):
        rows.append(
            {
                "gpu": "-",
                "field": "GPU count",
                "hetflow": str(len(by_uuid)),
                "nvidia-smi": str(len(query)),
                "match": False,
                "strict": True,
            }
        )
    for q in query:
        g = by_uuid.get(q["uuid"], {})
        t = topo.get("gpus", {}).get(f"GPU{q['index']}", {})
        want_links = dict(t.get("links", {}))
        have_links = {}
        me = int(q["index"])
        for link in node.get("gpu_links", []):
            label = f"NV{link.get('nvlinks', 0)}" if link.get("kind") == "NV" else str(link.get("kind", ""))
            if me in (link.get("a"), link.get("b")):
                have_links[f"GPU{link['b'] if link.get('a') == me else link['a']}"] = label
        pairs = [
            ("UUID", g.get("uuid", ""), q["uuid"], True),
            ("model", g.get("model", ""), q["name"], True),
            ("memory (MiB)", _mib(g.get("memory_bytes")), q["memory.total"], True),
            ("compute capability", g.get("compute_capability", ""), q["compute_cap"], True),
            ("driver", g.get("driver_version", ""), q["driver_version"], True),
            ("CUDA version", g.get("cuda_version") or "", xml.get("cuda_version", ""), True),
            (
                "MIG mode",
                "Enabled" if g.get("mig_enabled") else "Disabled",
                q["mig.mode.current"] if q["mig.mode.current"] in ("Enabled", "Disabled") else "Disabled",
                True,
            ),
            ("PCI bus id", (g.get("pci_bus_id") or "").upper(), q["pci.bus_id"].upper(), True),
            ("CPU affinity", g.get("cpu_affinity") or "", t.get("cpu_affinity", ""), True),
            ("NUMA node", _numa(g.get("numa_node")), _numa(t.get("numa_affinity")), True),
            (
                "architecture",
                g.get("product_architecture") or "",
                xml.get("gpus", {}).get(q["uuid"], {}).get("architecture", ""),
                False,
            ),
            (
                "links",
                json.dumps(have_links, sort_keys=True),
                json.dumps(want_links, sort_keys=True),
                len(want_links) > 0,
            ),
        ]
        for name, mine, theirs, strict in pairs:
            rows.append(
                {
                    "gpu": q["index"],
                    "field": name,
                    "hetflow": str(mine),
                    "nvidia-smi": str(theirs),
                    "match": str(mine) == str(theirs),
                    "strict": strict,
                }
            )
    return rows


# --- sharing: the slowdown fit -----------------------------------------------------------------

LOOP_RE = re.compile(r"loop n=(\d+) iters=(\d+) seconds=([0-9.]+)")


def loop_seconds(outputs: list[str]) -> list[float]:
    """Each `check loop` process's own kernel time (its line), in order."""
    out = []
    for text in outputs:
        m = LOOP_RE.search(text)
        if m is None:
            raise CheckError(f"a loop process printed no time: {text.strip()[-300:]!r}")
        out.append(float(m.group(3)))
    return out


def sharing_samples(times: dict[int, list[float]]) -> list[dict[str, float]]:
    """``times[load]``: each process's seconds at that load (load 1: alone).  One sample per
    load above 1: the mean shared time against the solo time, as ``SharedSample`` takes it."""
    if 1 not in times or not times[1]:
        raise CheckError("no solo run to compare with")
    solo = sum(times[1]) / len(times[1])
    return [
        {"solo": solo, "shared": sum(ts) / len(ts), "load": float(k)} for k, ts in sorted(times.items()) if k > 1 and ts
    ]


def fit_slowdown(samples: list[dict[str, float]], learn: Callable[[Any], float | None]) -> float | None:
    """``s`` by hetflow's own ``learn_slowdown`` (passed in: the one definition)."""
    from types import SimpleNamespace

    return learn([SimpleNamespace(**s) for s in samples])


# --- the report ------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    dev = report.get("device", {})
    lines = [
        f"### gpu-check, {report.get('date', '')}",
        "",
        f"Machine: {dev.get('gpu', '?')}, driver {dev.get('driver', '?')}, CUDA {dev.get('cuda', '?')},"
        f" kernel {dev.get('kernel', '?')}, {dev.get('os', '?')}.",
        "",
        "| part | result | seconds | what was seen |",
        "| --- | --- | --- | --- |",
    ]
    for p in report.get("parts", []):
        seen = (p.get("summary") or p.get("error") or "").replace("|", "/").replace("\n", " ")
        lines.append(f"| {p['name']} | {p['status']} | {p.get('seconds', 0):.1f} | {seen} |")
    rows = report.get("discovery_rows") or []
    if rows:
        lines += ["", "| GPU | field | hetflow | nvidia-smi | agree |", "| --- | --- | --- | --- | --- |"]
        for r in rows:
            agree = "yes" if r["match"] else ("NO" if r["strict"] else "no (shown only)")
            lines.append(f"| {r['gpu']} | {r['field']} | {r['hetflow'] or '-'} | {r['nvidia-smi'] or '-'} | {agree} |")
    return "\n".join(lines) + "\n"


def overall(parts: list[Part]) -> int:
    ran = [p for p in parts if p.status != "skipped"]
    return 0 if ran and all(p.status == "passed" for p in ran) else 1


# --- the kit (dry run) ------------------------------------------------------------------------


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
    for f in ("gpu-check", "check.cu", "sms.cu"):
        if not (kit / f).is_file():
            problems.append(f"{f} is missing")
    return problems


# --- running things ---------------------------------------------------------------------------


def sh(
    args: list[str] | str,
    *,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    check: bool = True,
    cwd: Path | None = None,
) -> str:
    """Run a command; its stdout+stderr.  A non-zero exit (with ``check``) is a CheckError
    that quotes the command and the end of its output."""
    shell = isinstance(args, str)
    try:
        r = subprocess.run(args, shell=shell, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise CheckError(f"{args if shell else ' '.join(args)}: no answer in {timeout:.0f} s") from None
    except OSError as exc:
        raise CheckError(f"{args if shell else ' '.join(args)}: {exc}") from None
    out = r.stdout + r.stderr
    if check and r.returncode != 0:
        raise CheckError(f"{args if shell else ' '.join(args)}: exit {r.returncode}: {out.strip()[-800:]}")
    return out


class Machine:
    """The GPU machine as the parts use it: hetflow from the kit's wheels, podman unpacked."""

    def __init__(self, kit: Path, out: Path) -> None:
        self.kit, self.out = kit, out
        self.site = WORK / "site"
        self.root = WORK / "root"
        self.bin = WORK / "bin"
        self.home = WORK / "home"
        self.prog = WORK / "check"
        self.podman_error = ""

    def save(self, name: str, text: str) -> None:
        (self.out / name).write_text(text)

    def install(self) -> None:
        if (self.site / "hetflow").is_dir():
            return
        wheels = sorted(str(p) for p in (self.kit / "wheels").glob("*.whl"))
        sh(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--target",
                str(self.site),
                *wheels,
            ],
            timeout=180,
        )

    def env(self, **extra: str) -> dict[str, str]:
        e = dict(os.environ)
        e.update(
            PYTHONPATH=str(self.site),
            HETFLOW_HOME=str(self.home),
            PATH=f"{self.bin}:{e.get('PATH', '')}",
            CONTAINERS_CONF=str(WORK / "containers.conf"),
            CONTAINERS_STORAGE_CONF=str(WORK / "storage.conf"),
            HETFLOW_CONTAINERS_CONF=str(WORK / "containers.conf"),
            HETFLOW_GPU_SAMPLE_INTERVAL="0.25",
        )
        e.update(extra)
        return e

    def hetflow(self, *args: str, timeout: float = 120, check: bool = True, cwd: Path | None = None) -> str:
        return sh(_hetflow_argv(*args), timeout=timeout, env=self.env(), check=check, cwd=cwd)

    def python(self, code: str, timeout: float = 60) -> str:
        return sh([sys.executable, "-c", code], timeout=timeout, env=self.env())

    def build_program(self) -> Path:
        if self.prog.is_file():
            return self.prog
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        # -cudart static: the container then needs only the driver's libcuda and a libc
        sh([nvcc, "-O2", "-cudart", "static", "-o", str(self.prog), str(self.kit / "check.cu")], timeout=180)
        return self.prog

    def build_sms(self) -> Path:
        """``sms``: the SMs the CUDA driver lets this process use (tools/gpu-kit/sms.cu)."""
        out = WORK / "sms"
        if not out.is_file():
            nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
            stubs = Path(nvcc).resolve().parent.parent / "lib64" / "stubs"  # libcuda to link against
            sh([nvcc, "-O2", "-o", str(out), str(self.kit / "sms.cu"), f"-L{stubs}", "-lcuda"], timeout=180)
        return out

    def podman(self) -> bool:
        """Unpack the carried podman; True when a container runs."""
        if (self.bin / "podman").is_file():
            return not self.podman_error
        for deb in sorted((self.kit / "debs").glob("*.deb")):
            sh(["dpkg", "-x", str(deb), str(self.root)], timeout=60)
        libs = f"{self.root}/lib/x86_64-linux-gnu:{self.root}/usr/lib/x86_64-linux-gnu"
        self.bin.mkdir(parents=True, exist_ok=True)
        for name, rel in (("podman", "usr/bin/podman"), ("conmon", "usr/bin/conmon"), ("runc", "usr/sbin/runc")):
            w = self.bin / name
            w.write_text(f'#!/bin/sh\nLD_LIBRARY_PATH={libs} exec {self.root}/{rel} "$@"\n')
            w.chmod(0o755)
        (WORK / "containers.conf").write_text(
            '[containers]\ndefault_ulimits = []\npids_limit = 0\n[engine]\ncgroup_manager = "cgroupfs"\n'
            f'runtime = "runc"\nevents_logger = "file"\nconmon_path = ["{self.bin}/conmon"]\n'
            f'helper_binaries_dir = ["{self.root}/usr/lib/podman"]\n[engine.runtimes]\nrunc = ["{self.bin}/runc"]\n'
        )
        (WORK / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{WORK}/store"\nrunroot = "{WORK}/run"\n'
        )
        policy = Path("/etc/containers/policy.json")
        if not policy.exists():
            policy.parent.mkdir(parents=True, exist_ok=True)
            policy.write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        try:
            sh(["podman", "load", "-i", str(self.kit / "image.oci.tar")], env=self.env(), timeout=120)
            sh(["podman", "run", "--rm", "--network", "none", IMAGE, "true"], env=self.env(), timeout=60)
        except CheckError as exc:
            self.podman_error = str(exc)
        return not self.podman_error


def timed(part: Part, body: Callable[[Part], None]) -> Part:
    t0 = time.monotonic()
    try:
        body(part)
        if part.status == "skipped" and not part.summary:
            part.status = "passed"
    except CheckError as exc:
        part.status, part.error = "failed", str(exc)
    except Exception as exc:  # the report must be written whatever breaks: say what did
        part.status, part.error = "failed", f"{type(exc).__name__}: {exc}"
        part.details["traceback"] = traceback.format_exc()[-3000:]
    part.seconds = time.monotonic() - t0
    return part


# --- the parts ------------------------------------------------------------------------------


def part_discovery(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        nodes = m.hetflow("nodes", "--json")
        m.save("nodes.json", nodes)
        topo_hetflow = m.hetflow("nodes", "--topo")
        m.save("nodes-topo.txt", topo_hetflow)
        query = sh(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
        xml = sh(["nvidia-smi", "-q", "-x"])
        topo = sh(["nvidia-smi", "topo", "-m"])
        for name, text in (("smi-query.csv", query), ("smi.xml", xml), ("smi-topo.txt", topo)):
            m.save(name, text)
        node = json.loads(nodes)[0]
        rows = compare_discovery(node, parse_query(query), parse_smi_xml(xml), parse_topo(topo))
        report["discovery_rows"] = rows
        q = parse_query(query)
        report["device"].update(
            gpu=", ".join(r["name"] for r in q),
            driver=q[0]["driver_version"] if q else "?",
            cuda=parse_smi_xml(xml)["cuda_version"],
        )
        bad = [r for r in rows if r["strict"] and not r["match"]]
        seen = [r for r in rows if not r["strict"] and not r["match"]]
        p.summary = f"{len(rows) - len(bad) - len(seen)} of {len(rows)} fields agree with nvidia-smi"
        if seen:
            p.summary += "; differ (shown only): " + ", ".join(
                f"{r['field']} ({r['hetflow'] or '-'} vs {r['nvidia-smi'] or '-'})" for r in seen
            )
        if bad:
            raise CheckError(
                "differ from nvidia-smi: "
                + "; ".join(
                    f"GPU {r['gpu']} {r['field']}: hetflow {r['hetflow']!r}, nvidia-smi {r['nvidia-smi']!r}"
                    for r in bad
                )
            )
        p.status = "passed"

    return run


WORKFLOW = """\
apiVersion: hetflow/v1
name: gpucheck
data:
  prog: check
steps:
  gpu:
    image: {image}
    command:
      - sh
      - -c
      - >-
        ls /dev; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; id -u;
        env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|LD_LIBRARY_PATH)=';
        /in/prog/check loop 2048 {iters} && /in/prog/check matmul 1024
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: 1Gi, gpus: 1}}
  cpu:
    image: {image}
    command: [sh, -c, "ls /dev; env | grep -E '^NVIDIA_VISIBLE_DEVICES='; /in/prog/check matmul 64; echo check-exit=$?"]
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: 256Mi}}
"""
CONTROL = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}


def step_lines(log: str, step: str) -> str:
    """One step's lines of `hetflow logs` output, without their "STEP.ATTEMPT | " prefix."""
    pat = re.compile(rf"^{re.escape(step)}\.\d+ \| ?(.*)$")
    return "\n".join(m.group(1) for ln in log.splitlines() if (m := pat.match(ln)))


def judge_injection(
    gpu_log: str, cpu_log: str, own_minor: int, attempt: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with the two steps' output and the GPU step's record (nothing: passed)."""
    wrong: list[str] = []
    devs = set(re.findall(r"^(nvidia[\w-]*)$", gpu_log, re.M))
    gpus = {d for d in devs if re.fullmatch(r"nvidia\d+", d)}
    if gpus != {f"nvidia{own_minor}"}:
        wrong.append(f"GPU step sees GPU nodes {sorted(gpus)}, expected only nvidia{own_minor}")
    if devs - gpus - CONTROL:
        wrong.append(f"GPU step sees unexpected nodes {sorted(devs - gpus - CONTROL)}")
    if not re.search(r"^ok n=1024 .*gpu=", gpu_log, re.M):
        wrong.append("the CUDA program did not print its checked result in the GPU step")
    status = dict(re.findall(r"^(CapEff|NoNewPrivs|Seccomp):\s*(\S+)", gpu_log, re.M))
    if status.get("CapEff", "").strip("0") or status.get("NoNewPrivs") != "1" or status.get("Seccomp") != "2":
        wrong.append(f"GPU step not hardened as hetflow promises: {status}")
    if re.search(r"^nvidia", cpu_log, re.M):
        wrong.append("the CPU step sees NVIDIA device nodes")
    if "ok n=64" in cpu_log or "check-exit=0" in cpu_log:
        wrong.append("the CUDA program found a GPU in the CPU step")
    used = {k: attempt.get(k) for k in ("gpu_util_mean", "gpu_util_max", "gpu_memory_peak", "gpu_memory_of")}
    if not used["gpu_util_max"] or not used["gpu_memory_peak"]:
        wrong.append(f"the run record holds no GPU use for the GPU step: {used}")
    return wrong, {"devices": sorted(devs), "hardening": status, "gpu_use": used}


def part_injection(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        prog = m.build_program()
        if not m.podman():
            p.details["containers"] = m.podman_error
            # no containers on this kernel: hetflow's variables on a plain process instead
            env = m.env(CUDA_VISIBLE_DEVICES="0", NVIDIA_VISIBLE_DEVICES="0")
            out = sh([str(prog), "matmul", "1024"], env=env)
            if not out.startswith("ok "):
                raise CheckError(f"containers cannot run here ({m.podman_error}); as a plain process: {out}")
            p.summary = (
                f"containers cannot run here ({m.podman_error[:200]});"
                f" as a plain process with hetflow's GPU variables: {out.strip()}"
            )
            p.status = "failed"
            p.error = "no containers: injection not checked"
            return
        wf = WORK / "wf"
        wf.mkdir(parents=True, exist_ok=True)
        shutil.copy(prog, wf / "check")
        (wf / "workflow.yaml").write_text(WORKFLOW.format(image=IMAGE, iters=1200))
        out = m.hetflow("run", "--no-cache", "workflow.yaml", timeout=240, check=False, cwd=wf)
        m.save("injection-run.txt", out)
        runs = json.loads(m.hetflow("ps", "--all", "--json"))
        rid = runs[0]["id"]
        shown = json.loads(m.hetflow("show", rid, "--json"))
        m.save("injection-show.json", json.dumps(shown, indent=1))
        gpu_log = m.hetflow("logs", rid, "gpu", check=False)
        cpu_log = m.hetflow("logs", rid, "cpu", check=False)
        trace = m.hetflow("trace", rid, check=False)
        m.save("injection-logs.txt", gpu_log + "\n" + cpu_log + "\n" + trace)
        gpu_log, cpu_log = step_lines(gpu_log, "gpu"), step_lines(cpu_log, "cpu")
        steps = {s["step"]: s for s in shown["steps"]}
        states = {k: v["state"] for k, v in steps.items()}
        if states != {"gpu": "succeeded", "cpu": "succeeded"}:
            raise CheckError(f"hetflow run: steps {states}: {out.strip()[-600:]}")
        node = (
            json.loads((m.out / "nodes.json").read_text())[0]
            if (m.out / "nodes.json").is_file()
            else json.loads(m.hetflow("nodes", "--json"))[0]
        )
        uuid = steps["gpu"]["attempt_history"][-1]["gpu_uuids"][0]
        minor = next(g["minor"] for g in node["gpus"] if g["uuid"] == uuid)
        wrong, seen = judge_injection(gpu_log, cpu_log, minor, steps["gpu"]["attempt_history"][-1])
        p.details.update(seen)
        use = seen["gpu_use"]
        peak = use["gpu_memory_peak"]
        p.summary = (
            f"GPU step: {seen['devices']}, CapEff/NoNewPrivs/Seccomp {seen['hardening']}, CUDA result checked; "
            f"CPU step: no GPU; recorded use: util mean {use['gpu_util_mean']}%, max {use['gpu_util_max']}%, "
            f"memory peak {peak / 2**20 if peak else peak} MiB ({use['gpu_memory_of']})"
        )
        if wrong:
            raise CheckError("; ".join(wrong))
        p.status = "passed"

    return run


def run_loops(prog: Path, k: int, n: int, iters: int, env: dict[str, str]) -> list[float]:
    procs = [
        subprocess.Popen(
            [str(prog), "loop", str(n), str(iters)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(k)
    ]
    outs = [pr.communicate(timeout=300)[0] for pr in procs]
    return loop_seconds(outs)


def part_sharing(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        prog = m.build_program()
        code = "from hetflow.plan import learn_slowdown; print(learn_slowdown.__module__)"
        m.python(code)  # hetflow's fit is importable: the one definition the fit below uses
        sys.path.insert(0, str(m.site))
        from hetflow.plan import learn_slowdown

        env = dict(os.environ)
        n, iters = 2048, 400
        modes: dict[str, Any] = {}
        times = {k: run_loops(prog, k, n, iters, env) for k in (1, 2, 4)}
        samples = sharing_samples(times)
        modes["time-slicing"] = {"times": times, "samples": samples, "s": fit_slowdown(samples, learn_slowdown)}
        mps = shutil.which("nvidia-cuda-mps-control")
        if mps:
            pipe, logs = WORK / "mps-pipe", WORK / "mps-log"
            pipe.mkdir(parents=True, exist_ok=True)
            logs.mkdir(parents=True, exist_ok=True)
            menv = {**env, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
            try:
                sh([mps, "-d"], env=menv, timeout=30)
                mtimes = {k: run_loops(prog, k, n, iters, menv) for k in (1, 2, 4)}
                msamples = sharing_samples(mtimes)
                modes["mps"] = {"times": mtimes, "samples": msamples, "s": fit_slowdown(msamples, learn_slowdown)}
            except CheckError as exc:
                modes["mps"] = {"error": str(exc)}
            finally:
                subprocess.run([mps], input="quit\n", text=True, env=menv, capture_output=True, timeout=30)
        else:
            modes["mps"] = {"error": "nvidia-cuda-mps-control is not on this machine"}
        p.details["modes"] = modes
        gpu = report["device"].get("gpu", "")
        (m.out / "slowdown.json").write_text(
            json.dumps({"gpu_model": gpu, "program": f"check loop {n} {iters}", "modes": modes}, indent=1) + "\n"
        )
        parts = []
        for mode, r in modes.items():
            if "s" in r:
                ts = {k: round(sum(v) / len(v), 3) for k, v in r["times"].items()}
                parts.append(f"{mode}: s = {r['s']:.3f} (mean seconds at load 1/2/4: {ts[1]}/{ts[2]}/{ts[4]})")
            else:
                parts.append(f"{mode}: not measured ({r['error'][:160]})")
        p.summary = "; ".join(parts) + f"; model default s = {DEFAULT_SLOWDOWN}"
        if modes["time-slicing"]["s"] is None:
            raise CheckError("no slowdown could be fitted")
        p.status = "passed"

    return run


LEASES_WORKFLOW = """\
apiVersion: hetflow/v1
name: gpuleases
data:
  prog: bin
steps:
  tenant:
    foreach: [0, 1]
    image: {image}
    command:
      - sh
      - -c
      - >-
        env | grep -E '^(CUDA_|HETFLOW_GPU_SHARE)' | sort; ls /dev | grep -E '^nvidia';
        /in/prog/sms && /in/prog/check loop 2048 {iters}
    inputs: {{prog: data.prog}}
    resources: {{cpus: 1, memory: 1Gi, gpu_share: 0.5}}
"""
SMS_RE = re.compile(r"^sms usable=(\d+) device=(\d+)$", re.M)


def judge_leases(
    mode: str, logs: dict[str, str], shown: dict[str, Any], clients: int, full_sms: int | None = None
) -> tuple[list[str], dict[str, Any]]:
    """What is wrong with two half-GPU tenants hetflow ran under ``mode`` (time-slicing or
    mps): both must succeed on the same GPU at the same time, each told its share.  A
    time-sliced tenant may use every SM; an MPS tenant must really be an MPS client: fewer
    SMs than the GPU has (``full_sms``, as a time-sliced tenant saw them; under MPS the
    driver's own count is the limited one: 66 of the H100's 132 at 50 %) and the daemon
    saw it connect (``clients``: distinct client processes in its control.log)."""
    wrong: list[str] = []
    steps = {s["step"]: s for s in shown.get("steps", [])}
    if sorted(steps) != ["tenant.0", "tenant.1"] or any(s["state"] != "succeeded" for s in steps.values()):
        states = ", ".join(f"{k}: {v['state']}" for k, v in sorted(steps.items()))
        return [f"{mode}: the tenants did not both succeed ({states or 'no steps'})"], {}
    if any(not s.get("attempt_history") for s in steps.values()):
        return [f"{mode}: the tenants did not run (taken from the cache: run with --no-cache)"], {}
    last = [s["attempt_history"][-1] for s in steps.values()]
    if len({tuple(a["gpu_uuids"]) for a in last}) != 1:
        wrong.append(f"{mode}: the tenants ran on different GPUs {[a['gpu_uuids'] for a in last]}")
    (a0, e0), (a1, e1) = ((a["started"], a["ended"]) for a in last)
    if not (a0 < e1 and a1 < e0):
        wrong.append(f"{mode}: the tenants did not run at the same time")
    seen: dict[str, Any] = {"sms": {}, "seconds": {}}
    for name, text in sorted(logs.items()):
        if "HETFLOW_GPU_SHARE=0.5" not in text:
            wrong.append(f"{mode}: {name} was not told its share (HETFLOW_GPU_SHARE)")
        m, t = SMS_RE.search(text), LOOP_RE.search(text)
        if m is None or t is None:
            wrong.append(f"{mode}: {name} printed no SM count or loop time: {text.strip()[-300:]!r}")
            continue
        usable, total = int(m.group(1)), int(m.group(2))
        seen["sms"][name], seen["seconds"][name] = f"{usable}/{total}", float(t.group(3))
        if mode == "mps" and full_sms is not None and usable >= full_sms:
            wrong.append(
                f"mps: {name} may use all {full_sms} SMs: it is not an MPS client (it could not reach the daemon)"
            )
        if mode == "time-slicing" and usable != total:
            wrong.append(f"time-slicing: {name} may use {usable} of {total} SMs")
    if mode == "mps" and clients < 2:
        wrong.append(f"mps: the MPS daemon saw {clients} client(s) connect, not 2")
    return wrong, seen


def mps_clients(control_log: str) -> int:
    """Distinct client processes the MPS control daemon accepted ("NEW CLIENT 1305 from user 0")."""
    return len(set(re.findall(r"NEW CLIENT (\d+) from user", control_log)))


def part_leases(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        if not m.podman():
            p.summary = f"skipped: containers cannot run here ({m.podman_error[:200]})"
            return
        folder = WORK / "leases"
        (folder / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy(m.build_program(), folder / "bin" / "check")
        shutil.copy(m.build_sms(), folder / "bin" / "sms")
        (folder / "workflow.yaml").write_text(LEASES_WORKFLOW.format(image=IMAGE, iters=800))
        mps = shutil.which("nvidia-cuda-mps-control")
        results: dict[str, Any] = {}
        wrongs: list[str] = []
        full_sms: int | None = None  # the GPU's SMs, as a time-sliced tenant sees them
        for mode in ("time-slicing", "mps"):
            extra = {"HETFLOW_GPU_SHARING": f"{mode}:2"}
            pipe, logs = WORK / "mps-pipe-leases", WORK / "mps-log-leases"
            if mode == "mps":
                if not mps:
                    results[mode] = "not run: nvidia-cuda-mps-control is not on this machine"
                    continue
                pipe.mkdir(parents=True, exist_ok=True)
                logs.mkdir(parents=True, exist_ok=True)
                menv = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
                sh([mps, "-d"], env=menv, timeout=30)
                extra["HETFLOW_MPS_PIPE_DIRECTORY"] = str(pipe)
            try:
                # --no-cache: the second mode's tenants are the same steps, and must run again
                out = sh(
                    _hetflow_argv("run", "--no-cache", "workflow.yaml"),
                    env=m.env(**extra),
                    timeout=240,
                    check=False,
                    cwd=folder,
                )
                rid = json.loads(m.hetflow("ps", "--all", "--json"))[0]["id"]
                shown = json.loads(m.hetflow("show", rid, "--json"))
                text = m.hetflow("logs", rid, check=False)
                m.save(f"leases-{mode}.txt", out + "\n" + text)
                logs_by = {s: step_lines(text, s) for s in ("tenant.0", "tenant.1")}
                control = (logs / "control.log").read_text() if (logs / "control.log").is_file() else ""
                if control:
                    m.save("leases-mps-control.log", control)
                clients = mps_clients(control)
                wrong, seen = judge_leases(mode, logs_by, shown, clients, full_sms)
                if mode == "time-slicing":
                    full_sms = max((int(x.split("/")[1]) for x in seen.get("sms", {}).values()), default=None)
                results[mode] = {**seen, "clients": clients if mode == "mps" else None, "problems": wrong}
                wrongs += wrong
            finally:
                if mode == "mps" and mps:
                    subprocess.run([mps], input="quit\n", text=True, env=menv, capture_output=True, timeout=30)
        p.details["modes"] = results
        said = []
        for mode, r in results.items():
            if isinstance(r, str):
                said.append(f"{mode}: {r}")
            else:
                said.append(
                    f"{mode}: SMs {r.get('sms')}, loop seconds {r.get('seconds')}"
                    + (f", {r['clients']} MPS clients" if r.get("clients") is not None else "")
                )
        p.summary = "two gpu_share 0.5 steps on one GPU through hetflow run; " + "; ".join(said)
        if wrongs:
            raise CheckError("; ".join(wrongs))
        p.status = "passed"

    return run


def _hetflow_argv(*args: str) -> list[str]:
    code = "import sys; sys.argv[0] = 'hetflow'; from hetflow.cli.main import main; main()"
    return [sys.executable, "-c", code, *args]


GANG_WORKER = r"""
import os, sys, torch, torch.distributed as dist
backend = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
dist.init_process_group(backend)
t = torch.full((1 << 20,), float(rank + 1), device="cuda")
dist.all_reduce(t)
want = world * (world + 1) / 2
print(f"rank {rank}/{world} backend {backend} sum {t[0].item()} want {want} ok {bool((t == want).all())}")
dist.destroy_process_group()
"""


def why_refused(output: str) -> str:
    """The line of a failed rank's output that says why (NCCL's "Last error:" is followed by
    it, e.g. "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60")."""
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln).strip() for ln in output.splitlines()]
    for i, ln in enumerate(lines):
        if ln == "Last error:" and i + 1 < len(lines):
            return lines[i + 1]
    found = [ln for ln in lines if re.search(r"error|refused|detected", ln, re.I) and "Warning" not in ln]
    return (found[0] if found else lines[-1] if lines else "")[:200]


def part_gang(m: Machine, report: dict[str, Any]) -> Callable[[Part], None]:
    def run(p: Part) -> None:
        m.install()
        # The environment hetflow gives each replica of a torch gang of 2 (execute.gang), on this host.
        code = (
            "import json; from hetflow.spec import Gang; from hetflow.execute.gang import layout, replica_env\n"
            "g = Gang(replicas=2, launcher='torch', port=29512)\n"
            "ranks = layout(['127.0.0.1', '127.0.0.1'], ['this-node', 'this-node'])\n"
            "print(json.dumps([replica_env(g, ranks, i) for i in range(2)]))"
        )
        envs = json.loads(m.python(code).strip().splitlines()[-1])
        p.details["contract"] = envs
        tried: list[dict[str, Any]] = []
        for n, backend in enumerate(("nccl", "gloo")):
            worker = WORK / "gang_worker.py"
            worker.write_text(GANG_WORKER)
            procs = [
                subprocess.Popen(
                    [sys.executable, str(worker), backend],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    # a port of its own per try: the first try's store may still hold its port
                    env={**os.environ, **e, "CUDA_VISIBLE_DEVICES": "0", "MASTER_PORT": str(int(e["MASTER_PORT"]) + n)},
                )
                for e in envs
            ]
            try:
                outs = [pr.communicate(timeout=90)[0] for pr in procs]
            except subprocess.TimeoutExpired:
                for pr in procs:
                    pr.kill()
                outs = ["(no answer in 90 s)"] * len(procs)
            ok = all(re.search(r" ok True$", o.strip(), re.M) for o in outs)
            tried.append({"backend": backend, "ok": ok, "output": [o.strip()[-600:] for o in outs]})
            if ok:
                break
        p.details["tried"] = tried
        last = tried[-1]
        if not last["ok"]:
            raise CheckError(f"all-reduce failed with {', '.join(t['backend'] for t in tried)}: {last['output']}")
        note = "" if last["backend"] == "nccl" else f" (NCCL refused: {why_refused(tried[0]['output'][0])})"
        p.summary = (
            "2 ranks on the one GPU with the environment hetflow gives a torch gang (RANK, WORLD_SIZE,"
            f" MASTER_ADDR/PORT, LOCAL_RANK); the all-reduce over {last['backend']} gave the known sum{note}"
        )
        p.status = "passed"

    return run


# --- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?", help="folder for gpu-check.json, gpu-check.md and raw outputs")
    ap.add_argument(
        "--kit", default=None, help="the folder `make gpu-kit` made (default: this script's folder, or ./gpu-kit)"
    )
    ap.add_argument("--dry-run", action="store_true", help="verify the kit folder here; run nothing on a GPU")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}")
    ap.add_argument("--write-manifest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parent
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


if __name__ == "__main__":
    sys.exit(main())
