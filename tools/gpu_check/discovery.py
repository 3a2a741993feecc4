"""The discovery part: ``hetflow nodes`` against what nvidia-smi prints, field by field."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from .common import CheckError, Part
from .machine import Machine, sh

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
