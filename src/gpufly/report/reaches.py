"""The report's "what it reaches" section: each measured figure of a bench run beside its datasheet peak, with
the spread of its repeats turned into an interval in the figure's own unit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.bench import BenchResult, BenchRun

SPREAD_NOTE = "p10-p90 of the timed repeats"
"""The interval of a run saved before the bench computed one for its median: the spread of its samples."""
PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
"""SI prefixes for rates (10^12 FLOP/s is a TFLOP/s), the largest the value reaches, so a GPU's matmul reads in
TFLOP/s and a CPU's in GFLOP/s. Bandwidth stops at GB/s, gpufly's unit for it everywhere (10^9 B/s)."""


def scaled(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` as (number, unit) with an SI prefix; seconds as us or ms."""
    if unit == "s":
        return (value * 1e6, "us") if value < 1e-3 else (value * 1e3, "ms")
    prefixes = PREFIXES[1:] if unit == "B/s" else PREFIXES
    factor, prefix = next(((f, p) for f, p in prefixes if abs(value) >= f), (1.0, ""))
    return value / factor, prefix + unit


def _digits(number: float) -> str:
    return f"{number:,.0f}" if abs(number) >= 100 else f"{number:.3g}"


@dataclass(frozen=True)
class Reach:
    """One measured figure: ``value``, ``low``..``high`` and ``peak`` in ``unit`` (the bench's base unit);
    ``noisy`` when the bench could not narrow its interval, with why in ``noise``; ``busy`` names the other
    processes busy just before or during a steady figure (`gpufly bench`'s "others busy": a process holding a core
    for the whole measurement can leave a narrow interval around a low figure)."""

    name: str
    group: str
    unit: str
    value: float
    low: float
    high: float
    repeats: int
    interval: str
    peak: float | None
    peak_source: str | None
    percent_of_peak: float | None
    note: str | None
    noisy: bool = False
    noise: str | None = None
    busy: tuple[str, ...] = ()

    @property
    def others_busy(self) -> bool:
        """A steady figure measured while other processes were busy: it decides nothing, as a noisy one."""
        return bool(self.busy) and not self.noisy

    @property
    def tag(self) -> str:
        """What the figure's name is marked with: "noisy", "others busy" or nothing."""
        return _("noisy") if self.noisy else _("others busy") if self.others_busy else ""

    def shown(self, value: float | None) -> str:
        """``value`` (in the base unit) with an SI prefix, e.g. '412 TFLOP/s'."""
        if value is None:
            return "N/A"
        number, unit = scaled(value, self.unit)
        return f"{_digits(number)} {unit}"

    @property
    def interval_text(self) -> str:
        """The interval in the value's own unit: '398-421 TFLOP/s'."""
        number, unit = scaled(self.value, self.unit)
        factor = number / self.value if self.value else 1.0
        return f"{_digits(self.low * factor)}-{_digits(self.high * factor)} {unit}"

    @property
    def summary(self) -> str:
        """'412 TFLOP/s (398-421 TFLOP/s), 42% of 989 TFLOP/s'."""
        noisy = _(", noisy") if self.noisy else _(", others busy") if self.others_busy else ""
        text = f"{self.shown(self.value)} ({self.interval_text}{noisy})"
        if self.peak is not None and self.percent_of_peak is not None:
            text += _(", {percent} of {peak}").format(percent=f"{self.percent_of_peak:.0f}%",
                                                      peak=self.shown(self.peak))
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "busy": list(self.busy), "others_busy": self.others_busy, "summary": self.summary}


def reach(result: BenchResult) -> Reach:
    """A bench result as a Reach, with the interval of its median as the bench gives it; a run saved before the
    bench computed one has the spread of its samples instead, said so. A rate is work over time, so its bounds from
    the samples are the value scaled by median/p90 and median/p10; a time (launch latency) scales the other way."""
    timing = result.timing
    if result.value_low is not None and result.value_high is not None:
        interval = (_("{level} interval of the median").format(level=f"{100 * timing.ci_level:.0f}%")
                    if timing.ci_level is not None else _("interval of the median"))
        low, high = result.value_low, result.value_high
    else:
        low, high = _spread(result)
        interval = SPREAD_NOTE
    busy = sorted(result.busy_processes, key=lambda process: -float(process.get("cpu_percent") or 0.0))
    return Reach(result.name, result.group, result.unit, result.value, low, high, timing.repeats, interval,
                 result.peak, result.peak_source, result.percent_of_peak, result.note, result.noisy, result.noise,
                 tuple(f"{p.get('name') or '?'} (pid {p.get('pid')}) at {float(p.get('cpu_percent') or 0):.0f}% CPU"
                       for p in busy))


def _spread(result: BenchResult) -> tuple[float, float]:
    timing = result.timing
    if timing.median_s <= 0 or timing.p10_s <= 0:
        return result.value, result.value
    if result.unit == "s":
        return result.value * timing.p10_s / timing.median_s, result.value * timing.p90_s / timing.median_s
    return result.value * timing.median_s / timing.p90_s, result.value * timing.median_s / timing.p10_s


@dataclass(frozen=True)
class ReachSection:
    """A bench run's figures as Reaches, the device it measured, and what could not be measured."""

    device: str
    kind: str
    source: str
    figures: tuple[Reach, ...]
    not_measured: tuple[tuple[str, str], ...]

    @property
    def against_peak(self) -> list[Reach]:
        return [figure for figure in self.figures if figure.peak is not None]

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "kind": self.kind, "source": self.source,
                "figures": [figure.to_dict() for figure in self.figures],
                "not_measured": [{"name": name, "why": why} for name, why in self.not_measured]}


def reach_section(run: BenchRun, source: str) -> ReachSection:
    """The section for ``run``; ``source`` says where it came from ("measured now" or the file's path)."""
    return ReachSection(run.device.summary, run.device.kind, source, tuple(reach(r) for r in run.results),
                        tuple((e.name, e.error) for e in run.errors))
