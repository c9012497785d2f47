"""When a figure is too noisy to trust: re-measure it up to a limit, then mark it noisy with the reason.

A figure is the median of its repeats; its interval (bench/timing.py, order statistics at about 95%) says how
well the repeats pin that median down. Wider than ``NOISE_LIMIT`` of the median and the figure is measured
again, from scratch, up to ``MAX_ATTEMPTS`` times; the attempt with the narrowest interval is kept, and if none
was narrow enough the figure is marked noisy, with what the machine was doing (bench/conditions.py) as the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufly.bench.timing import Timing

NOISE_LIMIT = 0.10
"""The widest interval, as a share of the median, a figure may have and still count as measured: 10%. Why 10%:
the differences a bench run exists to show are about that size (a GPU held at 90% of its clock by a power cap, a
second thread adding a fraction of the first, `fit --calibrate` scaling a datasheet figure), and `--compare` can
only call a change real when both intervals are narrower than the change."""
MAX_ATTEMPTS = 3
"""Measurements of one figure at most (the first and two re-measures) before it is reported as noisy: a burst of
other work seldom outlasts three, and a machine busy for longer should not make the run three times as long."""
NAMED = 3
"""A noisy figure's reason names at most this many busy processes (the run's conditions keep up to five)."""
CLOCK_CHANGE = 0.05
"""A CPU or GPU clock that moved more than this share between a figure's start and end is named as a cause."""


@dataclass(frozen=True)
class Measured:
    """The timing kept for a figure, every attempt's timing in order, and whether it stayed too wide."""

    timing: Timing
    attempts: tuple[Timing, ...]
    noisy: bool
    disagrees: str | None = None
    """Why the kept timing is not trusted though narrow enough: what ``check`` said of it (e.g. the sweep
    measured a very different figure at the same size); None when it agreed or nothing was checked."""


def too_wide(timing: Timing, limit: float = NOISE_LIMIT) -> bool:
    """Whether the median's interval is wider than ``limit`` of the median (no interval: not judged, not wide)."""
    width = timing.relative_width
    return width is not None and width > limit


def measure_until_stable(time_once: Callable[[], Timing], *, limit: float = NOISE_LIMIT,
                         attempts: int = MAX_ATTEMPTS,
                         check: Callable[[Timing], str | None] | None = None) -> Measured:
    """Time with ``time_once`` until an attempt's interval is within ``limit``, at most ``attempts`` times.

    Each attempt is a whole fresh measurement (warm-up and repeats), so a burst of other work during one attempt
    does not leak into the next; of several wide attempts, the narrowest is kept. ``check`` (optional) says why a
    narrow attempt still cannot be trusted (None where it can): such an attempt is measured again too, within the
    same ``attempts``; if every attempt fails, one that passed ``check`` is preferred, then the narrowest, and the
    figure is noisy with ``disagrees`` set when the kept attempt failed ``check``.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    tried: list[tuple[Timing, str | None]] = []
    for _ in range(attempts):
        timing = time_once()
        disagrees = check(timing) if check is not None else None
        tried.append((timing, disagrees))
        if not too_wide(timing, limit) and disagrees is None:
            return Measured(timing, tuple(t for t, _ in tried), noisy=False)
    kept, why = min(tried, key=lambda pair: (pair[1] is not None, pair[0].relative_width or 0.0))
    return Measured(kept, tuple(t for t, _ in tried), noisy=True, disagrees=why)


def _moved(name: str, start: dict[str, Any], end: dict[str, Any], key: str) -> str | None:
    before, after = start.get(key), end.get(key)
    if not before or not after or abs(after - before) / before <= CLOCK_CHANGE:
        return None
    return f"{name} clock {before:,} -> {after:,} MHz"


def causes(start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """What the conditions around a figure show that could have disturbed it, most telling first: the processes
    busy before or during it (each at its higher share), the load, GPU slowdowns, clocks that moved.

    >>> causes({"load_average_1m": 0.4, "cpu_cores": 2}, {"load_average_1m": 1.9, "cpu_cores": 2,
    ...        "busy_processes": [{"pid": 123, "name": "python", "cpu_percent": 95.0}]})
    ['python (pid 123) at 95% CPU', 'load average 1.9 on 2 cores']
    """
    busy: dict[int, dict[str, Any]] = {}
    for process in [*end.get("busy_processes", []), *start.get("busy_processes", [])]:
        if process["pid"] not in busy or process["cpu_percent"] > busy[process["pid"]]["cpu_percent"]:
            busy[process["pid"]] = process
    ranked = sorted(busy.values(), key=lambda p: -p["cpu_percent"])
    found = [f"{p['name']} (pid {p['pid']}) at {p['cpu_percent']:.0f}% CPU" for p in ranked[:NAMED]]
    if len(ranked) > NAMED:
        found.append(f"{len(ranked) - NAMED} more busy process{'es' if len(ranked) - NAMED > 1 else ''}")
    loads = [c["load_average_1m"] for c in (start, end) if c.get("load_average_1m") is not None]
    cores = end.get("cpu_cores") or start.get("cpu_cores")
    if loads:
        found.append(f"load average {max(loads):g}" + (f" on {cores} cores" if cores else ""))
    slowdowns = sorted({*start.get("slowdown_reasons", []), *end.get("slowdown_reasons", [])})
    if slowdowns:
        found.append("GPU clocks held back: " + ", ".join(slowdowns))
    found += [moved for moved in (_moved("CPU", start, end, "cpu_clock_mhz"), _moved("GPU SM", start, end,
                                                                                     "sm_clock_mhz")) if moved]
    return found


def noise_reason(measured: Measured, start: dict[str, Any], end: dict[str, Any], limit: float = NOISE_LIMIT) -> str:
    """Why a figure is marked noisy: how wide it stayed, after how many attempts, and what else was running.

    The load average counts this benchmark's own threads too, so it is a cause only beside a busy process or a
    load above the cores; the text gives it either way, for the reader to judge.
    """
    width = measured.timing.relative_width or 0.0
    count = len(measured.attempts)
    after = f"after {count} attempt{'s' if count > 1 else ''}"
    head = (f"{measured.disagrees}, {after}" if measured.disagrees is not None
            else f"interval {width:.1%} of the median {after} (limit {limit:.0%})")
    return "; ".join([head, *disturbance(start, end)])


def disturbance(start: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """``causes``, saying so where no other busy process, GPU slowdown or clock change was seen."""
    seen = causes(start, end)
    if not any("pid" in cause or "GPU" in cause or "clock" in cause for cause in seen):
        seen.append("no other busy process seen")
    return seen
