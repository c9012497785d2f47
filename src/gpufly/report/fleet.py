"""The report's fleet section: `gpufly fleet report DIR` on the page, and each GPU's measured ceiling beside the
median of its identical siblings (the reference the fleet's slow-GPU check holds it against).

The findings are the fleet report's own (``gpufly.fleet.build_report``), so the page, ``--json`` and
`gpufly fleet report` never disagree; this module only adds the figures the chart draws.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufly.fleet import FleetInput, FleetReport, Measurement

MAX_BARS = 24
"""GPUs drawn per chart: the slowest ones, so a fleet of hundreds of GPUs keeps a chart a person can read (the
JSON and the findings still carry every GPU)."""


@dataclass(frozen=True)
class CeilingBar:
    """One GPU's figure as a percentage of its siblings' median (above 100: faster), with its own interval."""

    label: str
    percent: float
    low: float | None
    high: float | None
    measured: str
    median: str
    slow: bool
    """The fleet report flagged it (behind beyond the tolerance and beyond its own noise)."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CeilingChart:
    """One comparable figure (GPU model, benchmark, size, unit) across every GPU that measured it."""

    gpu_model: str
    benchmark: str
    shape: str
    bars: tuple[CeilingBar, ...]
    left_out: int
    """GPUs not drawn (past MAX_BARS, the fastest)."""

    @property
    def title(self) -> str:
        size = f" ({self.shape})" if self.shape else ""
        return f"{self.benchmark}{size} on {self.gpu_model}"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_model": self.gpu_model, "benchmark": self.benchmark, "shape": self.shape,
                "bars": [bar.to_dict() for bar in self.bars], "left_out": self.left_out}


@dataclass(frozen=True)
class FleetSection:
    """The fleet report of the files under ``source``, and a ceiling chart per figure measured on two or more
    identical GPUs."""

    source: str
    report: FleetReport
    charts: tuple[CeilingChart, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.report.to_dict(), "source": self.source, "ceilings": [c.to_dict() for c in self.charts]}


def fleet_section(path: Path) -> FleetSection:
    """Read the nodes' saved files under ``path`` and compare them, as `gpufly fleet report PATH` does."""
    from gpufly.fleet import build_report, read_fleet

    fleet = read_fleet([path])
    report = build_report(fleet)
    return FleetSection(source=str(path), report=report, charts=ceiling_charts(fleet, report))


def ceiling_charts(fleet: FleetInput, report: FleetReport) -> tuple[CeilingChart, ...]:
    """Each figure two or more identical GPUs measured, each GPU against the median of the others (the fleet's
    reference), its slow ones as the report flagged them."""
    from gpufly.fleet.ceilings import measurements

    slow = {(f.node, f.gpu, f.subject) for f in report.findings if f.kind == "slow-gpu"}
    groups: dict[tuple[str, str, str, str], list[Measurement]] = defaultdict(list)
    for found in measurements(fleet.nodes):
        groups[found.key].append(found)
    charts = []
    for (model, benchmark, shape, _unit), members in groups.items():
        if len(members) < 2:
            continue
        bars = sorted((_bar(m, [o for o in members if o is not m], slow) for m in members),
                      key=lambda bar: bar.percent)
        charts.append(CeilingChart(model, benchmark, shape, tuple(bars[:MAX_BARS]), max(0, len(bars) - MAX_BARS)))
    return tuple(charts)


def _bar(member: Measurement, others: Sequence[Measurement], slow: set[tuple[str | None, int | None, str]]
         ) -> CeilingBar:
    """Speed relative to the siblings' median: value/median for a rate, median/value for a latency, so a bar
    short of 100% is always behind."""
    from gpufly.fleet.ceilings import shown

    result = member.result
    median = statistics.median(o.result.value for o in others)

    def percent(value: float | None) -> float | None:
        if value is None or value <= 0 or median <= 0:
            return None
        return 100.0 * (value / median if member.higher_is_better else median / value)

    ends = sorted(p for p in (percent(result.value_low), percent(result.value_high)) if p is not None)
    low, high = (ends[0], ends[1]) if len(ends) == 2 else (None, None)
    return CeilingBar(label=member.label, percent=percent(result.value) or 0.0, low=low, high=high,
                      measured=shown(result.value, result.unit), median=shown(median, result.unit),
                      slow=(member.node, member.gpu, result.name) in slow)
