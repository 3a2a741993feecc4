"""``hetflow report RUN -o report.html``: one self-contained page about a run, after
Nextflow's execution report.

No network: CSS and the timeline's SVG are inline, no script, no font or image to fetch,
so the file can be mailed or archived and opens the same anywhere.  Every string that
came from a user (names, images, messages, paths) goes through ``html.escape``.

Sections: a summary; the timeline, the stored plan and what ran on one time axis; per-step
resource use against the request, with steps asking ``OVER_ASK`` times what they used
flagged; the trace table (``report.trace``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from html import escape

from hetflow.plan import DEFAULT_ESTIMATE, OVER_ASK, Instance, Placement, Plan
from hetflow.report.actual import actual_schedule, bar_resources
from hetflow.report.gantt import gantt_svg
from hetflow.report.runs import param_text
from hetflow.report.trace import DEFAULT_TRACE_FIELDS, cached_steps, cell, trace_rows
from hetflow.spec import fanout_parent, format_bytes, format_duration
from hetflow.state import SUCCEEDED, AttemptRecord, ParamRecord, RunRecord, StepRecord

_CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 20px; color: #111; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 12px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
th { background: #f3f4f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; font-size: 13px; }
dl.summary dt { color: #555; } dl.summary dd { margin: 0; }
.flag { color: #a40000; font-weight: bold; }
.meter { display: inline-block; width: 120px; height: 10px; background: #e5e7eb; vertical-align: middle; }
.meter span { display: block; height: 10px; background: #4e79a7; }
.state-succeeded { color: #1a7f37; } .state-failed { color: #a40000; } .state-stopped { color: #9a6700; }
.timeline svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 12px; }
"""


@dataclass(frozen=True)
class StepUse:
    """One step's request and its most recent measured attempt, for the resource table."""

    step: str
    attempts: int
    cpus: float | None
    memory: int | None
    peak_memory: int | None
    cpu_seconds: float | None
    cores_used: float | None  # CPU time over the container's run time
    over_memory: bool  # asked >= OVER_ASK x the peak
    over_cpus: bool  # asked >= OVER_ASK x the cores used


def step_use(step: str, attempts: Sequence[AttemptRecord]) -> StepUse:
    """The succeeded attempt if there is one (else the last), so the figures describe
    one whole execution of the step."""
    done = [a for a in attempts if a.state == SUCCEEDED] or list(attempts)
    a = done[-1]
    realtime = a.run_ended - a.run_started if a.run_ended is not None and a.run_started is not None else None
    cores = a.cpu_seconds / realtime if a.cpu_seconds is not None and realtime else None
    over_memory = bool(a.memory and a.peak_memory is not None and a.memory >= OVER_ASK * max(a.peak_memory, 1))
    over_cpus = bool(a.cpus and cores is not None and a.cpus >= OVER_ASK * max(cores, 0.01))
    return StepUse(step, len(attempts), a.cpus, a.memory, a.peak_memory, a.cpu_seconds, cores, over_memory, over_cpus)


def plan_scale(run: RunRecord, attempts: list[AttemptRecord], planned: Plan | None) -> float | None:
    """The factor the plan's lanes are drawn at, where every planned step's length was the
    planner's default (no ``estimate:``, ``plan.DEFAULT_ESTIMATE`` s each) and the plan is longer
    than the run: 60 s bars set a 128 s axis for a 7.6 s run, the run a sliver at its left.
    Scaled to the run's length they still show the plan's order and overlap; None: as planned."""
    if planned is None or not planned.placements:
        return None
    steps = json.loads(run.spec_json or "{}").get("steps") or {}
    guessed = set()
    for name, step in steps.items():
        variants = step.get("variants") or {}
        estimates = [v.get("estimate") for v in variants.values()] if variants else [step.get("estimate")]
        if all(e is None for e in estimates):
            guessed.add(name)
    if not all(t in guessed or fanout_parent(t) in guessed for t in planned.placements):
        return None
    ran = actual_schedule(run, attempts)[0].makespan
    return ran / planned.makespan if 0 < ran < planned.makespan else None


def timeline(run: RunRecord, attempts: list[AttemptRecord], planned: Plan | None) -> Plan:
    """The plan's placements (lanes ``plan: MACHINE``) and the attempts that ran (lanes
    ``run: NODE``) as one Plan, so one chart draws both on one time axis from the run's start
    (the plan's scaled by ``plan_scale`` where its lengths were all the default's)."""
    actual, _ = actual_schedule(run, attempts)
    placements: dict[str, Placement] = {}
    if planned is not None:
        k = plan_scale(run, attempts, planned) or 1.0
        for name, p in planned.placements.items():
            label = f"{name} (plan)"
            placements[label] = replace(
                p, task=label, machine=f"plan: {p.machine}", start=p.start * k, finish=p.finish * k
            )
    for name, p in actual.placements.items():
        placements[name] = replace(p, machine=f"run: {p.machine_class}")
    # The chart's title states the actual makespan; the planned one is in the summary.
    return Plan(placements=placements, makespan=actual.makespan, cost=0.0, algorithm=f"run {run.id}")


def _cell(text: str, cls: str = "") -> str:
    return f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>"


def _summary(run: RunRecord, steps: list[StepRecord], attempts: list[AttemptRecord], planned: Plan | None) -> str:
    end = run.ended or time.time()
    begun = run.started or run.created
    by_state = Counter(s.state for s in steps)
    measured = [a.cpu_seconds for a in attempts if a.cpu_seconds is not None]
    cpu_hours = f"{sum(measured) / 3600:.4f}" if measured else "unknown"
    items = [
        ("run", run.id),
        ("workflow", run.name),
        ("workflow file", run.workflow_file),
        ("state", run.state),
        ("backend", run.backend),
        ("started", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(begun))),
        ("duration", format_duration(max(0.0, end - begun))),
        ("steps", ", ".join(f"{n} {s}" for s, n in sorted(by_state.items())) or "none"),
        ("attempts", str(len(attempts))),
        ("CPU-hours", f"{cpu_hours} (measured for {len(measured)} of {len(attempts)} attempts)"),
    ]
    if planned is not None:
        items.append(("planned makespan", format_duration(planned.makespan)))
        items.append(("planned cost", f"${planned.cost:,.4f}" if planned.cost else "unknown (no prices)"))
    else:
        items.append(("cost", "unknown (the run has no stored plan)"))
    if run.message:
        items.append(("message", run.message))
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    return f'<dl class="summary">{rows}</dl>'


def _params(params: Sequence[ParamRecord]) -> str:
    """The params section: name, value, where it was written; nothing for a run without params."""
    if not params:
        return ""
    rows = "".join(f"<tr>{_cell(p.name)}{_cell(param_text(p.value))}{_cell(p.source)}</tr>" for p in params)
    head = "<tr><th>param</th><th>value</th><th>from</th></tr>"
    return f'<section id="params"><h2>Params</h2><table><thead>{head}</thead><tbody>{rows}</tbody></table></section>\n'


def _meter(used: float | None, asked: float | None) -> str:
    if used is None or not asked:
        return ""
    pct = min(100.0, 100.0 * used / asked)
    return f'<span class="meter" title="{pct:.0f}% of the request"><span style="width:{pct:.1f}%"></span></span>'


def _resources(uses: list[StepUse], items: Mapping[str, str]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("step", "attempts", "memory asked", "peak memory", "", "CPUs asked", "cores used", "", "CPU time", "")
    )
    rows = []
    for u in uses:
        flags = []
        if u.over_memory:
            flags.append(f"asks &ge;{OVER_ASK:g}x the memory it used")
        if u.over_cpus:
            flags.append(f"asks &ge;{OVER_ASK:g}x the CPUs it used")
        flag = f'<td class="flag" data-flag="over-ask">{"; ".join(flags)}</td>' if flags else "<td></td>"
        rows.append(
            f'<tr data-step="{escape(u.step)}">'
            + _cell(f"{u.step} {items[u.step]}" if u.step in items else u.step)
            + _cell(str(u.attempts), "num")
            + _cell(format_bytes(u.memory) if u.memory else "-", "num")
            + _cell(format_bytes(u.peak_memory) if u.peak_memory is not None else "unknown", "num")
            + f"<td>{_meter(u.peak_memory, u.memory)}</td>"
            + _cell(f"{u.cpus:g}" if u.cpus else "-", "num")
            + _cell(f"{u.cores_used:.2f}" if u.cores_used is not None else "unknown", "num")
            + f"<td>{_meter(u.cores_used, u.cpus)}</td>"
            + _cell(format_duration(u.cpu_seconds) if u.cpu_seconds is not None else "unknown", "num")
            + flag
            + "</tr>"
        )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _trace(attempts: list[AttemptRecord], steps: list[StepRecord], items: Mapping[str, str]) -> str:
    rows = trace_rows(attempts, cached_steps(steps), items)
    head = "".join(f"<th>{escape(f)}</th>" for f in DEFAULT_TRACE_FIELDS)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="state-{escape(str(r[f]))}">{escape(cell(f, r[f]))}</td>'
            if f == "status"
            else _cell(cell(f, r[f]), "num" if isinstance(r[f], int | float) else "")
            for f in DEFAULT_TRACE_FIELDS
        )
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="trace"><tr>{head}</tr>{"".join(body)}</table>'


def _inline_svg(svg: str) -> str:
    """The chart inside the page: HTML parses inline SVG without its XML namespace, so the
    page holds no URL at all (the namespace is a name, but keeps the file free of any)."""
    return svg.replace(' xmlns="http://www.w3.org/2000/svg"', "", 1)


def timeline_svg(run: RunRecord, attempts: list[AttemptRecord], planned: Plan | None) -> str:
    """The stored plan and what ran on one time axis, as an SVG document ('' when no
    attempt started): the report's timeline, and the dashboard's Gantt."""
    chart = timeline(run, attempts, planned)
    if not chart.placements:
        return ""
    return gantt_svg(
        chart,
        Instance(tasks=(), edges=(), classes=()),
        title=f"{run.name}: plan and run (actual)",
        resources=bar_resources(attempts),
    )


def run_report_html(
    run: RunRecord,
    steps: list[StepRecord],
    attempts: list[AttemptRecord],
    planned: Plan | None,
    items: Mapping[str, str] | None = None,
    params: Sequence[ParamRecord] = (),
) -> str:
    """The whole page for one run; ``planned`` is the plan stored with it, if any; ``items``:
    fan-out items' values by step (``report.items.item_labels``), shown beside their names;
    ``params``: its effective params and where each came from (``Store.run_params``)."""
    by_step: dict[str, list[AttemptRecord]] = {}
    for a in attempts:
        by_step.setdefault(a.step, []).append(a)
    uses = [step_use(s.step, by_step[s.step]) for s in steps if s.step in by_step]
    svg = timeline_svg(run, attempts, planned)
    timeline_html = _inline_svg(svg) if svg else '<p class="note">no attempt started</p>'

    plan_note = (
        "Lanes <code>plan: MACHINE</code> show the stored plan, <code>run: NODE</code> what ran; "
        "both from the run's start."
        if planned is not None
        else "The run has no stored plan (greedy dispatch): only what ran is drawn."
    )
    scale = plan_scale(run, attempts, planned)
    if scale is not None and planned is not None:
        plan_note += (
            f" No step has an <code>estimate:</code>, so the planner took {DEFAULT_ESTIMATE:g} s for each"
            f" (a {escape(format_duration(planned.makespan))} plan): its lanes are drawn scaled to the run's"
            f" length (&#215;{scale:.3g}), to show its order and overlap, not its times."
        )
    unmeasured = sum(1 for a in attempts if a.peak_memory is None)
    measure_note = (
        f"{unmeasured} attempt(s) without measurements (the backend cannot measure, or the attempt never ran)."
        if unmeasured
        else ""
    )
    title = f"hetflow run {run.id} of {run.name}"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n"
        f'<section id="summary"><h2>Summary</h2>{_summary(run, steps, attempts, planned)}</section>\n'
        f"{_params(params)}"
        f'<section id="timeline" class="timeline"><h2>Timeline</h2><p class="note">{plan_note}</p>\n'
        f"{timeline_html}</section>\n"
        f'<section id="resources"><h2>Resources: asked and used</h2>'
        f'<p class="note">Peak memory is the attempt\'s cgroup peak; cores used are CPU time over run time. '
        f"{escape(measure_note)}</p>{_resources(uses, items or {})}</section>\n"
        f'<section id="trace"><h2>Trace</h2>{_trace(attempts, steps, items or {})}</section>\n'
        "</body>\n</html>\n"
    )
