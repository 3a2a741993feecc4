"""The report: gpu-check.md's tables and the exit status."""

from __future__ import annotations

from typing import Any

from .common import Part


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
