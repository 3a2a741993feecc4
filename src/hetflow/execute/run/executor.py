"""Driving an opened run to its end in this process: the one ``Runner`` of the executor
built from the run's stored plan (``build_runner``), SIGINT and SIGTERM turned into a stop
that ``resume`` continues, and how it ended (``Ended``: the command's exit code).  What
``hetflow run`` and the detached executor do once ``session`` has opened the run."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from hetflow.execute.data.cache import ResultCache
from hetflow.execute.run.compose import compose_runner
from hetflow.execute.run.notify import start_notifier
from hetflow.execute.run.options import Reporter, RunOptions
from hetflow.execute.run.runner import Runner
from hetflow.execute.settings import RunnerConfig
from hetflow.execute.submit.prepare import Say
from hetflow.execute.submit.runplan import GREEDY, LOCAL, RunPlan
from hetflow.execute.submit.session import OpenRun
from hetflow.plan import GreedyChooser, PlanChooser, VariantChooser
from hetflow.state import RUN_STOPPED, RUN_SUCCEEDED

__all__ = ["Ended", "build_runner", "chooser_of", "drive"]


def chooser_of(plan: RunPlan) -> VariantChooser:
    """The local runner's variant rule: the plan's variants, or greedy."""
    if plan.planner == GREEDY and not plan.variants:
        return GreedyChooser()
    return PlanChooser(plan.variants, plan.reasons)  # greedy with --variant/--prefer: those steps follow them


def build_runner(
    opened: OpenRun, reporter: Reporter | None, config: RunnerConfig | None = None, *, grace: int | None = None
) -> Runner:
    """The one Runner of this executor, following the stored plan: on this machine the plan's
    variants and order; on a cluster its placements on its machine classes."""
    plan = opened.plan
    options = RunOptions(
        reporter=reporter,
        config=config or RunnerConfig.from_env(),
        chooser=chooser_of(plan),
        priority=dict(plan.priority) or None,
        placements=plan.plan.placements if plan.plan is not None and plan.kind != LOCAL else None,
        classes=plan.classes,
        data=plan.data,
        cache=ResultCache(opened.store, opened.store.path.parent / "cache") if opened.settings.cache else None,
        grace=grace,
    )
    run = opened.store.run(opened.run.id)
    return compose_runner(
        store=opened.store, node=opened.node, workflow=opened.workflow, run=run, backend=opened.backend, options=options
    )


@dataclass(frozen=True)
class Ended:
    state: str
    interrupted: bool = False  # a signal stopped the run (no summary follows)
    signal: int | None = None  # which: the command exits 128 + it, as a shell's does

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal  # 130 for SIGINT, 143 for SIGTERM
        return 0 if self.state == RUN_SUCCEEDED else 1


def drive(
    opened: OpenRun, reporter: Reporter | None, say: Say, *, banner: bool = True, grace: int | None = None
) -> Ended:
    """Run to the end.  SIGINT (Ctrl-C) or SIGTERM stops the run (its containers or jobs,
    each given ``grace`` seconds to save its work, None: the engine's default; a second signal kills them at once) so
    that it can be resumed."""
    runner = build_runner(opened, reporter, grace=grace)
    runner.install_signal_handlers()
    if banner:
        say(opened.banner())
    notifier = start_notifier(opened.store.path, opened.run.id, opened.settings.notify)
    try:
        state = runner.execute()
    finally:
        if notifier is not None:
            notifier.finish()  # the run has ended: its last POSTs, for at most their budget
    if runner.signalled is None or state != RUN_STOPPED:
        return Ended(state)  # no signal, or one that came as the run ended by itself
    rid = opened.run.id
    by = "hetflow stop" if runner.handed_off else signal.Signals(runner.signalled).name
    say(f"run {rid} stopped by {by}; 'hetflow resume {rid}' continues it")
    return Ended(RUN_STOPPED, interrupted=True, signal=runner.signalled)
