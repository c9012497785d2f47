"""A short torch.profiler window, summarized: kernel count and length, device busy time, the top entries.

The profiler's raw trace is large and hard to read; the diagnosis needs only a few figures from it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from gpufly.profile.records import TraceSummary


class TraceWindow:
    """Opens ``torch.profiler`` once warm-up is done, closes it ``steps`` steps later, and keeps the summary.

    ``advance(done)`` is told the number of steps recorded after each step; ``cuda`` is set when the profiler
    starts (it decides whether kernels are traced).
    """

    def __init__(self, steps: int, warmup: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self.steps = steps
        self.warmup = warmup
        self.cuda = False
        self.summary: TraceSummary | None = None
        self._clock = clock
        self._profile: Any = None
        self._started_at: int | None = None
        self._opened_at = 0.0
        self.cost_s = 0.0
        """What opening torch.profiler and closing and summarizing it took (between steps, on the loop's thread)."""

    def advance(self, done: int) -> float:
        """Open or close the window after ``done`` steps; returns the seconds that took (0 when neither)."""
        if not self.steps:
            return 0.0
        if self._profile is None and self._started_at is None and done >= self.warmup:
            from torch.profiler import ProfilerActivity, profile

            entered = self._clock()
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self._profile = profile(activities=activities)
            self._profile.__enter__()
            self._started_at = done
            self._opened_at = self._clock()
            self.cost_s += self._opened_at - entered
            return self._opened_at - entered
        if self._profile is not None and done - (self._started_at or 0) >= self.steps:
            return self._close(self.steps)
        return 0.0

    def close(self, done: int) -> None:
        """The loop ended (or crashed) inside the window: summarize the steps it saw."""
        if self._profile is not None:
            self._close(done - (self._started_at or 0))

    def _close(self, steps: int) -> float:
        profile, self._profile = self._profile, None
        entered = self._clock()
        window = entered - self._opened_at
        profile.__exit__(None, None, None)
        self.summary = summarize(profile, max(steps, 1), window, cuda=self.cuda)
        spent = self._clock() - entered
        self.cost_s += spent
        self.summary.first_step = self._started_at
        self.summary.cost_s = self.cost_s
        return spent

    def left_out(self) -> range:
        """The indices of the steps the window traced (none before it opened)."""
        if self._started_at is None:
            return range(0)
        traced = self.summary.steps if self.summary is not None else self.steps
        return range(self._started_at, self._started_at + traced)


def summarize(trace: Any, steps: int, window_s: float, cuda: bool) -> TraceSummary:
    """From a finished ``torch.profiler.profile``: on CUDA its kernels, on CPU its top operators."""
    events = list(trace.events())
    if cuda:
        kernels = [e for e in events if _is_kernel(e)]
        durations = [e.device_time_total for e in kernels]  # microseconds
        busy = sum(durations) / 1e6
        median = statistics.median(durations) if durations else None
        top = _top(kernels, lambda e: e.device_time_total)
        return TraceSummary(steps=steps, window_s=window_s, device_busy_s=busy, kernels=len(kernels),
                            median_kernel_us=median, top=top)
    ops = [e for e in events if e.device_type.name == "CPU"]
    return TraceSummary(steps=steps, window_s=window_s, kernels=len(ops),
                        top=_top(ops, lambda e: e.self_cpu_time_total))


def _is_kernel(event: Any) -> bool:
    return event.device_type.name == "CUDA" and event.device_time_total > 0


def _top(events: list[Any], time_of: Any, n: int = 8) -> list[tuple[str, float, int]]:
    totals: dict[str, list[float]] = {}
    for event in events:
        entry = totals.setdefault(event.name, [0.0, 0])
        entry[0] += time_of(event) / 1000.0
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:n]
    return [(name[:80], round(ms, 3), int(calls)) for name, (ms, calls) in ranked]
