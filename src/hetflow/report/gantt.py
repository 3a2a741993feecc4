"""Gantt charts of a plan (or of a finished run turned into a Plan) as SVG, HTML or PNG.

The SVG is written by hand, so drawing a plan needs no new dependency.  One lane per
machine, plus one per GPU of a GPU machine: a GPU step is drawn in the lane of each GPU it
holds ("gpu.a100-0 / GPU 2"), a CPU step in its machine's lane.  Steps that share a machine
at the same time are stacked in rows of that lane.  Bars are colored by variant with the
same colors in every chart (cpu blue, gpu orange), and every bar carries a ``<title>``
that browsers show on hover.

``gantt_layout`` does the geometry once; the SVG writer and the matplotlib fallback for PNG
both draw from it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from hetflow.errors import UsageError
from hetflow.plan import Instance, Placement, Plan
from hetflow.spec import format_bytes, format_duration

# Tableau 10: distinguishable, and readable by most color-blind viewers.
PALETTE = (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
)  # fmt: skip
FIXED_COLORS = {"cpu": "#4e79a7", "gpu": "#f28e2b", "default": "#76b7b2"}
_NICE_STEPS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 7200, 10800, 21600)

ROW_H = 20.0  # one row of bars
LANE_PAD = 3.0  # above and below the rows of a lane
CHAR_W = 6.4  # average width of an 11px sans-serif character, to decide whether a label fits
TOP = 44.0  # title band
AXIS_H = 26.0  # tick labels under the lanes


@dataclass(frozen=True)
class Lane:
    label: str
    machine: str
    gpu: int | None  # None: the machine's CPU lane
    y: float
    rows: int

    @property
    def height(self) -> float:
        return self.rows * ROW_H + 2 * LANE_PAD


@dataclass(frozen=True)
class Bar:
    placement: Placement
    lane: int
    row: int
    primary: bool  # False for the extra lanes of a multi-GPU step: one primary bar per step
    x: float
    y: float
    width: float


@dataclass(frozen=True)
class Layout:
    width: float
    height: float
    left: float  # x of time 0
    scale: float  # pixels per second
    span: float  # seconds shown
    lanes: tuple[Lane, ...]
    bars: tuple[Bar, ...]
    colors: dict[str, str]  # variant -> color, in legend order
    ticks: tuple[tuple[float, str], ...]  # (seconds, label)
    title: str
    legend_y: float
    # task -> what its hover says of resources in place of the placement's cores and memory
    # (a run's bar: what the attempt asked and used, ``runreport.timeline``)
    resources: Mapping[str, str] = field(default_factory=dict)


def variant_colors(variants: Sequence[str]) -> dict[str, str]:
    """Colors for these variants: cpu, gpu and default always get the same ones; others
    take the unused palette colors in name order."""
    names = sorted(set(variants), key=lambda v: (v not in FIXED_COLORS, v))
    free = [c for c in PALETTE if c not in FIXED_COLORS.values()]
    out: dict[str, str] = {}
    for i, v in enumerate(n for n in names if n not in FIXED_COLORS):
        out[v] = free[i % len(free)]
    return {v: FIXED_COLORS.get(v) or out[v] for v in names}


def _text_color(fill: str) -> str:
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def _tick_label(t: float, step: float) -> str:
    if step < 1:
        return f"{t:.1f}s"
    if step < 60:
        return f"{t:g}s"
    if step < 3600:
        m, s = divmod(round(t), 60)
        return f"{m}m" if not s else f"{m}m{s:02d}s"
    h, rest = divmod(round(t), 3600)
    return f"{h}h" if not rest else f"{h}h{rest // 60:02d}m"


def time_ticks(span: float, most: int = 10) -> tuple[tuple[float, str], ...]:
    """Ticks at a round step (1, 2, 5, 15, 30 s, 1, 2, 5 min, ... 6 h) with at most ``most`` intervals."""
    step = next((s for s in _NICE_STEPS if span / s <= most), None)
    if step is None:
        step = 21600.0 * -(-span // (21600.0 * most))
    n = int(span / step + 1e-9)
    return tuple((i * step, _tick_label(i * step, step)) for i in range(n + 1))


def _lane_keys(plan: Plan, instance: Instance) -> list[tuple[str, int | None]]:
    """Every machine of the instance (idle ones too: idleness is what the chart shows), then
    any machine the plan names that the instance lacks (a run drawn against a changed cluster)."""
    keys: list[tuple[str, int | None]] = []
    for c in instance.classes:
        for mid in c.machine_ids():
            keys.append((mid, None))
            keys += [(mid, g) for g in range(c.gpus)]
    known = set(keys)
    extra = sorted({k for p in plan.placements.values() for k in _held(p)} - known, key=str)
    return keys + extra


def _held(p: Placement) -> list[tuple[str, int | None]]:
    """The lanes a placement is drawn in: each GPU it holds, else its machine's CPU lane;
    a gang's replicas on every machine they hold."""
    where = p.ranks or ((p.machine, p.gpus),)
    return list(dict.fromkeys((m, g) for m, gpus in where for g in (gpus or (None,))))


def _pack(placements: list[Placement]) -> dict[str, int]:
    """Row per task so that bars in one row never overlap in time (first free row)."""
    ends: list[float] = []
    rows: dict[str, int] = {}
    for p in sorted(placements, key=lambda p: (p.start, p.finish, p.task)):
        row = next((i for i, end in enumerate(ends) if end <= p.start + 1e-9), len(ends))
        if row == len(ends):
            ends.append(p.finish)
        ends[row] = p.finish
        rows[p.task] = row
    return rows


def gantt_layout(
    plan: Plan,
    instance: Instance,
    *,
    title: str = "",
    width: float = 1200.0,
    resources: Mapping[str, str] | None = None,
) -> Layout:
    """Lanes, bars, colors and ticks in SVG pixels (y downwards); time 0 at ``left``.
    ``resources``: a task's hover text about resources, where the placement's says too little."""
    keys = _lane_keys(plan, instance)
    members: dict[tuple[str, int | None], list[Placement]] = {k: [] for k in keys}
    for p in plan.placements.values():
        for key in _held(p):
            members.setdefault(key, []).append(p)
    label_w = max([len(_lane_label(k)) for k in keys] + [8]) * CHAR_W + 16
    left, right = label_w, width - 24
    span = max([plan.makespan] + [p.finish for p in plan.placements.values()])
    span = span if span > 0 else 1.0
    scale = (right - left) / span

    lanes: list[Lane] = []
    bars: list[Bar] = []
    y = TOP
    for i, k in enumerate(keys):
        rows = _pack(members[k])
        lane = Lane(_lane_label(k), k[0], k[1], y, max(rows.values(), default=0) + 1)
        lanes.append(lane)
        for p in members[k]:
            primary = k[1] is None or k[1] == p.gpus[0]
            top = y + LANE_PAD + rows[p.task] * ROW_H + 1
            bars.append(Bar(p, i, rows[p.task], primary, left + p.start * scale, top, (p.finish - p.start) * scale))
        y += lane.height
    colors = variant_colors([p.variant for p in plan.placements.values()])
    head = title or plan.algorithm
    full = f"{head} — makespan {format_duration(plan.makespan)}, cost ${plan.cost:,.2f}"
    legend_y = y + AXIS_H + 8
    legend_rows = -(-len(colors) // 6) if colors else 0
    height = legend_y + legend_rows * 20 + 8
    ticks = time_ticks(span)
    lay = Layout(width, height, left, scale, span, tuple(lanes), tuple(bars), colors, ticks, full, legend_y)
    return replace(lay, resources=dict(resources or {}))


def _lane_label(key: tuple[str, int | None]) -> str:
    machine, gpu = key
    return machine if gpu is None else f"{machine} / GPU {gpu}"


def _hover(p: Placement, resources: str | None = None) -> str:
    where = p.machine + (f" / GPU {','.join(map(str, p.gpus))}" if p.gpus else "")
    return (
        f"{p.task} ({p.variant}) on {where}\n"
        f"{format_duration(p.start)} to {format_duration(p.finish)} ({format_duration(p.finish - p.start)})\n"
        + (resources or f"{p.cores:g} cores, {format_bytes(p.memory)}")
    )


def _svg_from_layout(lay: Layout) -> str:
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width:.0f}" height="{lay.height:.0f}" '
        f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" font-family="Helvetica, Arial, sans-serif" font-size="11">',
        f"<title>{escape(lay.title)}</title>",
        "<style>.bar:hover, .bar-more:hover { stroke: #000; stroke-width: 1.5; }</style>",
        f'<rect width="{lay.width:.0f}" height="{lay.height:.0f}" fill="#fff"/>',
        f'<text class="title" x="12" y="26" font-size="15" font-weight="bold">{escape(lay.title)}</text>',
    ]
    bottom = lay.lanes[-1].y + lay.lanes[-1].height if lay.lanes else TOP
    out.append('<g class="lanes">')
    shade, last = False, None
    for lane in lay.lanes:
        if lane.machine != last:
            shade, last = not shade, lane.machine
        fill = "#f3f4f6" if shade else "#fff"
        out.append(
            f'<rect class="lane" data-lane={quoteattr(lane.label)} x="0" y="{lane.y:.2f}" '
            f'width="{lay.width:.0f}" height="{lane.height:.2f}" fill="{fill}"/>'
        )
        out.append(
            f'<text class="lane-label" x="{lay.left - 8:.2f}" y="{lane.y + lane.height / 2 + 4:.2f}" '
            f'text-anchor="end" fill="{"#555" if lane.gpu is not None else "#111"}">{escape(lane.label)}</text>'
        )
    out.append("</g>")
    out.append(f'<g class="axis" data-origin="{lay.left:.6f}" data-px-per-s="{lay.scale:.9f}">')
    for t, label in lay.ticks:
        x = lay.left + t * lay.scale
        out.append(f'<line x1="{x:.2f}" y1="{TOP:.2f}" x2="{x:.2f}" y2="{bottom + 4:.2f}" stroke="#d0d4da"/>')
        out.append(f'<text class="tick" x="{x:.2f}" y="{bottom + 17:.2f}" text-anchor="middle">{label}</text>')
    out.append(
        f'<line x1="{lay.left:.2f}" y1="{bottom:.2f}" x2="{lay.left + lay.span * lay.scale:.2f}" '
        f'y2="{bottom:.2f}" stroke="#333"/>'
    )
    out.append("</g>")
    out.append('<g class="bars">')
    for b in lay.bars:
        p = b.placement
        fill = lay.colors[p.variant]
        cls = "bar" if b.primary else "bar-more"
        hover = escape(_hover(p, lay.resources.get(p.task)))
        out.append(f'<g class="task" data-task={quoteattr(p.task)}>')
        out.append(
            f'<rect class="{cls}" data-task={quoteattr(p.task)} data-variant={quoteattr(p.variant)} '
            f'x="{b.x:.4f}" y="{b.y:.2f}" width="{max(b.width, 0.5):.4f}" height="{ROW_H - 2:.2f}" '
            f'fill="{fill}" stroke="#fff" stroke-width="1"><title>{hover}</title></rect>'
        )
        if len(p.task) * CHAR_W + 6 <= b.width:
            out.append(
                f'<text class="label" x="{b.x + 3:.2f}" y="{b.y + ROW_H / 2 + 3:.2f}" fill="{_text_color(fill)}" '
                f'pointer-events="none">{escape(p.task)}</text>'
            )
        out.append("</g>")
    out.append("</g>")
    out.append('<g class="legend">')
    x = lay.left
    for i, (variant, color) in enumerate(lay.colors.items()):
        if i and i % 6 == 0:
            x = lay.left
        y = lay.legend_y + (i // 6) * 20
        out.append(
            f'<g class="legend-entry" data-variant={quoteattr(variant)}>'
            f'<rect x="{x:.2f}" y="{y:.2f}" width="14" height="14" fill="{color}"/>'
            f'<text x="{x + 19:.2f}" y="{y + 11:.2f}">{escape(variant)}</text></g>'
        )
        x += 19 + len(variant) * CHAR_W + 24
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def gantt_svg(plan: Plan, instance: Instance, *, title: str = "", resources: Mapping[str, str] | None = None) -> str:
    """The plan as a standalone SVG document (makespan and cost in the title)."""
    return _svg_from_layout(gantt_layout(plan, instance, title=title, resources=resources))


def gantt_html(plan: Plan, instance: Instance, *, title: str = "") -> str:
    """A page holding the SVG; hovering a bar shows its step, variant, machine and times."""
    lay = gantt_layout(plan, instance, title=title)
    notes = "".join(f"<li>{escape(n)}</li>" for n in plan.notes)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(lay.title)}</title>\n"
        "<style>body { font-family: Helvetica, Arial, sans-serif; margin: 16px; }\n"
        "svg { max-width: 100%; height: auto; }</style>\n</head>\n<body>\n"
        + _svg_from_layout(lay)
        + (f"<ul>{notes}</ul>\n" if notes else "")
        + "</body>\n</html>\n"
    )


def _optional_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _png_with_matplotlib(plt: Any, lay: Layout, path: Path) -> None:
    """Draw the same layout with matplotlib, in the SVG's pixel coordinates (y downwards)."""
    fig = plt.figure(figsize=(lay.width / 100, lay.height / 100), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, lay.width)
    ax.set_ylim(lay.height, 0)
    ax.axis("off")
    patches = importlib.import_module("matplotlib.patches")
    ax.text(12, 26, lay.title, fontsize=11, fontweight="bold")
    for lane in lay.lanes:
        ax.text(lay.left - 8, lane.y + lane.height / 2 + 4, lane.label, ha="right", fontsize=8)
        ax.axhline(lane.y, color="#e5e7eb", linewidth=0.5)
    bottom = lay.lanes[-1].y + lay.lanes[-1].height if lay.lanes else TOP
    for t, label in lay.ticks:
        x = lay.left + t * lay.scale
        ax.plot([x, x], [TOP, bottom], color="#d0d4da", linewidth=0.5)
        ax.text(x, bottom + 17, label, ha="center", fontsize=8)
    for b in lay.bars:
        fill = lay.colors[b.placement.variant]
        ax.add_patch(patches.Rectangle((b.x, b.y), max(b.width, 0.5), ROW_H - 2, facecolor=fill, edgecolor="#fff"))
        if len(b.placement.task) * CHAR_W + 6 <= b.width:
            ax.text(b.x + 3, b.y + ROW_H / 2 + 3, b.placement.task, fontsize=8, color=_text_color(fill))
    for i, (variant, color) in enumerate(lay.colors.items()):
        x, y = lay.left + (i % 6) * 120, lay.legend_y + (i // 6) * 20
        ax.add_patch(patches.Rectangle((x, y), 14, 14, facecolor=color))
        ax.text(x + 19, y + 11, variant, fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_gantt(plan: Plan, instance: Instance, path: Path, *, title: str = "") -> None:
    """Write the chart to ``path``: .svg, .html (.htm), or .png when cairosvg or matplotlib
    is installed.  Raises UsageError for another suffix or a PNG without either."""
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(gantt_svg(plan, instance, title=title), encoding="utf-8")
    elif suffix in (".html", ".htm"):
        path.write_text(gantt_html(plan, instance, title=title), encoding="utf-8")
    elif suffix == ".png":
        if (cairosvg := _optional_module("cairosvg")) is not None:
            cairosvg.svg2png(bytestring=gantt_svg(plan, instance, title=title).encode(), write_to=str(path))
            return
        if (mpl := _optional_module("matplotlib")) is not None:
            mpl.use("Agg")  # no display: draw to a file
            plt = importlib.import_module("matplotlib.pyplot")
            _png_with_matplotlib(plt, gantt_layout(plan, instance, title=title), path)
            return
        raise UsageError(
            f"cannot write {path}: a PNG needs cairosvg or matplotlib; write .svg or .html instead, "
            "or pip install cairosvg"
        )
    else:
        raise UsageError(f"cannot write a Gantt chart as {path.name!r}: use a .svg, .html or .png file name")
