"""The report's "what to do next": the actions the other sections point to, ranked by expected gain.

Gains are never guessed. An action ranks first by its tier (a failed check blocks everything after it; a measured
gain beats an upper bound; a warning or a suggestion comes last), then by its gain factor where one is known:
a tuner speedup is measured; a profile finding's is the bound Amdahl's law gives for the share of the step it
explains; a bench figure's is the bound of reaching the datasheet peak.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext

if TYPE_CHECKING:
    from gpufly.report.build import TuneSummary
    from gpufly.report.models_fit import BuyRow, ModelFitRow
    from gpufly.report.reaches import ReachSection
    from gpufly.report.setup import SetupSection

BLOCKING, MEASURED, BOUND, ADVICE = 0, 1, 2, 3
TIERS = {BLOCKING: "blocking", MEASURED: "measured", BOUND: "upper bound", ADVICE: "advice"}
LOW_PERCENT_OF_PEAK = 50.0
"""Under half its datasheet peak, a figure points at clocks, power, the link or the install. A floor set to flag
gross shortfalls only, not a calibrated threshold: what a healthy card reaches differs by kernel and card."""
TOP = 5


@dataclass(frozen=True)
class Action:
    """One thing to do: what, the command (or code change) that does it, why, and the expected gain."""

    title: str
    command: str
    why: str
    tier: int
    gain: float | None
    section: str

    @property
    def gain_text(self) -> str:
        if self.tier == BLOCKING:
            return _("unblocks the GPU stack")
        if self.gain is None:
            return {MEASURED: _("measured"), BOUND: _("upper bound"), ADVICE: _("advice")}[self.tier]
        gain = f"{self.gain:.2f}x"
        return (_("{gain} measured") if self.tier == MEASURED else _("up to {gain}")).format(gain=gain)

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "tier_name": TIERS[self.tier], "gain_text": self.gain_text}


def rank(actions: Iterable[Action], top: int = TOP) -> list[Action]:
    """Tier first, larger gain first within a tier (unknown gains after known ones), the first ``top``."""
    return sorted(actions, key=lambda a: (a.tier, a.gain is None, -(a.gain or 0.0)))[:top]


def setup_actions(setup: SetupSection) -> list[Action]:
    """Each failed or warned doctor check that names a fix."""
    return [Action(f.what, f.fix, f.why, BLOCKING if f.status == "fail" else ADVICE, None, "set-up")
            for f in setup.findings if f.status in ("fail", "warn") and f.fix]


def bench_actions(reaches: ReachSection | None, has_gpu: bool) -> list[Action]:
    """A figure far under its peak (bound: reaching the peak), or a suggestion to measure when nothing was. A figure
    the bench marked noisy, or measured while other processes were busy, decides nothing: its shortfall may be the
    other load on the machine."""
    if reaches is None:
        return [Action(_("measure what this machine really reaches"), "gpufly report --bench",
                       _("datasheet figures are ceilings; a slow link, low clocks or a power cap show only when "
                         "measured"),
                       ADVICE, None, "what it reaches")] if has_gpu else []
    return [Action(_("{figure} reaches {percent} of its datasheet peak").format(
                       figure=figure.name, percent=f"{figure.percent_of_peak:.0f}%"),
                   "gpufly doctor && nvidia-smi -q -d CLOCK,POWER,PERFORMANCE",
                   _("{summary}: check throttling, the power limit and the PCIe link").format(summary=figure.summary),
                   BOUND, 100.0 / figure.percent_of_peak, "what it reaches")
            for figure in reaches.against_peak
            if figure.percent_of_peak and figure.percent_of_peak < LOW_PERCENT_OF_PEAK and not figure.noisy
            and not figure.others_busy]


def tune_actions(tune: TuneSummary | None) -> list[Action]:
    if tune is None or not tune.speedup or tune.speedup <= 1.0 or tune.best is None:
        return []
    return [Action(_("apply the tuner's best safe configuration ({best})").format(best=tune.best),
                   "; ".join(tune.code) or tune.best,
                   ngettext("measured over {count} trial, loss unchanged",
                            "measured over {count} trials, loss unchanged", tune.trials).format(count=tune.trials),
                   MEASURED, tune.speedup, "tune")]


def profile_actions(profile: dict[str, Any] | None) -> list[Action]:
    """Each profile finding; its bound is 1 / (1 - the measured share of the step it explains), and unknown where
    none was measured (a rule's weight is only its rank: a CPU run's .item() calls would otherwise claim 1.11x)."""
    if profile is None:
        return []
    return [Action(finding["title"], finding["change"], finding["seen"], BOUND,
                   1.0 / (1.0 - share) if (share := finding.get("explains")) is not None and 0 < share < 1 else None,
                   "profile")
            for finding in profile["findings"]]


def model_actions(rows: Sequence[ModelFitRow], buys: Sequence[BuyRow]) -> list[Action]:
    """The largest model that runs here (or, without a GPU, the fastest setup within the budget for the largest
    model that has one): the step from a report to a first run. ``buys`` come in the report's model order,
    smallest model first."""
    fitting = [row for row in rows if row.fits and row.task == "infer"]
    if fitting:
        largest = max(fitting, key=lambda row: (row.needs_bytes, row.speed or 0.0))
        return [Action(_("run {model} ({job}) on {gpu}").format(model=largest.model, job=largest.job, gpu=largest.gpu),
                       largest.command, _("the largest of the report's models that fits here"), ADVICE, None,
                       "what fits")]
    priced = [row for row in buys if row.gpu is not None and row.task == "infer"]
    if not priced:
        return []
    biggest = priced[-1].model_id
    best = max((row for row in priced if row.model_id == biggest), key=lambda row: row.speed or 0.0)
    count = f"{best.gpus}x " if best.gpus > 1 else ""
    return [Action(_("to run {model} ({job}): {gpus} ({price} at launch)").format(
                       model=best.model, job=best.job, gpus=f"{count}{best.gpu}", price=f"${best.price_usd or 0:,.0f}"),
                   best.command, _("the largest of the report's models that runs within {budget}, on its fastest "
                                   "setup there").format(budget=f"${best.budget_usd:,.0f}"), ADVICE, None,
                   "what fits")]
