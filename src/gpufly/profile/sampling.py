"""Which steps the profiler looks inside, and what its own code costs the loop.

Counting syncs means wrapping ``torch.Tensor`` methods, and every wrapped call then costs about a microsecond
and a half more (five on a tensor that requires grad; CPU Adam calls ``.item()`` once per parameter per step);
timing the forward pass puts the model on ``nn.Module``'s slower call path. Paid on every step that came to
8-16% of a 1 ms step. So the profiler looks inside only some steps: every warm-up step and the first ``first``
measured ones, then windows of ``window`` consecutive steps at random places (a fixed period would line up
with a loop that logs every N steps), about ``share`` of the steps, and once ``enough`` steps have been looked
inside, ``later_share`` of them. Putting the wrappers in and taking them out costs too (about 0.2 ms each way on
a CPU, and the first steps after each change run slower), so the windows are few and long. Wall time, data
wait and batch size are measured on every step.

gpufly's own time is timed on every detailed step and on runs of plain ones (``own_window`` steps, about ``own_share``
of them): timing it takes clock readings of its own, and on a 1 ms step the four a plain step needed for it cost
about 3.5 µs of the 10 that gpufly cost there, seen from outside. The plain steps left untimed cost what the timed
ones measured (the median of theirs), so the figure stays a measurement, taken on a sample.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class Sampling:
    """How many steps are detailed: all of the first ``first`` after warm-up, then ``share`` of the rest in
    windows of ``window`` steps until ``enough`` measured steps have been detailed (the first ``first`` included),
    then ``later_share``. ``share=1`` details every step (what tests that count exact calls use)."""

    first: int = 8
    window: int = 16
    """Long windows, because opening and closing one costs more than a detailed step: on the 1 ms CPU loop of
    ``benchmarks/profile_overhead.py``, about 0.3 ms for the two (``torch.Tensor``'s slots rebuilt, and the steps
    after each change slower while the interpreter's caches of Tensor attribute lookups fill again) against about
    0.08 ms for a detailed step inside a long window. A window of 4 cost about 1 ms in all."""
    share: float = 1 / 16
    enough: int = 64
    """With 64 detailed steps the per-step figures (syncs, the breakdown's shares) are settled and the memory trend
    has its readings; a long run then pays for a quarter as many windows."""
    later_share: float = 1 / 64
    syncs_every: int = 4
    """The sync counter goes in for the first run of detailed steps (the warm-up and the first ``first``) and then
    for one window in this many. It wraps ``torch.Tensor``'s methods, and every change to that class sends the
    interpreter's specialised attribute lookups on tensors (all of torch's Python code: modules, optimizers) back to
    their slow path for the next few dozen steps: on the 1 ms loop of ``benchmarks/profile_overhead.py`` about 6 µs
    a step on the median, as much as all the rest of the profiler's cost. A loop's syncs repeat from step to step, so
    fewer windows count them as well; the hooks, the breakdown and memory are in every window."""
    own_window: int = 8
    own_share: float = 1 / 8
    """gpufly times its own code on runs of ``own_window`` plain steps, about ``own_share`` of them (every detailed
    step too); ``own_share=1`` times it on every step. The first plain steps are one such run, so a short loop has
    its plain steps' cost measured too."""

    def __post_init__(self) -> None:
        if (self.first < 0 or self.window < 1 or self.enough < 0 or not 0 < self.share <= 1
                or not 0 < self.later_share <= 1 or self.syncs_every < 1 or self.own_window < 1
                or not 0 < self.own_share <= 1):
            raise ValueError("Sampling needs first >= 0, window >= 1, enough >= 0, 0 < share <= 1, "
                             "0 < later_share <= 1, syncs_every >= 1, own_window >= 1 and 0 < own_share <= 1")


class Span(NamedTuple):
    """What the schedule says of a step, and until where it holds."""

    detailed: bool
    until: int
    """The first step after it that may differ: the step clock asks again only there."""
    times_own: bool
    """Whether gpufly's own time is timed on it (every detailed step; runs of plain ones)."""


DEFAULT_SAMPLING = Sampling()
EVERY_STEP = Sampling(first=0, window=1, share=1.0)
_NEVER = 2**62
"""A step index no loop reaches: "no change of detail ahead"."""


class DetailSchedule:
    """Answers, step by step in order, whether a step is detailed; the windows' places come from a seeded
    generator, so a run is reproducible."""

    def __init__(self, sampling: Sampling, warmup: int, seed: int = 0) -> None:
        self.sampling = sampling
        self._always_until = warmup + sampling.first
        self._seed = seed
        self.restart()

    def restart(self) -> None:
        """Start again from step 0 (the steps before training were dropped)."""
        self._random = random.Random(self._seed)
        self._own_random = random.Random(self._seed + 1)
        self._window_end = 0
        self._sampled = self.sampling.first
        self._next_start = self._always_until + self._gap()
        self._own_start = 0
        self._own_end: int | None = None
        """Where the current run of plain steps whose own time is timed ends (None: before the first plain step)."""

    def span(self, index: int) -> Span:
        """Whether step ``index`` is detailed and has its own time timed, and the first step after it that may differ:
        the step clock asks again only there, so a step between costs it one comparison. Asked in order, at those
        steps."""
        if self.sampling.share >= 1:
            return Span(True, _NEVER, True)
        if index < self._always_until:
            return Span(True, self._always_until, True)
        if index < self._window_end:
            return Span(True, self._window_end, True)
        if index >= self._next_start:
            self._window_end = index + self.sampling.window
            self._sampled += self.sampling.window
            self._next_start = self._window_end + self._gap()
            return Span(True, self._window_end, True)
        if index in (self._window_end, self._always_until):
            # The step after a run of detailed steps pays for closing it (the wrappers and hooks taken out): timed.
            return Span(False, index + 1, True)
        return self._plain(index, self._next_start)

    def _plain(self, index: int, until: int) -> Span:
        """A plain step up to ``until`` (where the next window opens): timed or not, and until where."""
        sampling = self.sampling
        if sampling.own_share >= 1:
            return Span(False, until, True)
        if self._own_end is None:
            self._own_start, self._own_end = index, index + sampling.own_window
        elif index >= self._own_end:
            mean = sampling.own_window / sampling.own_share - sampling.own_window
            self._own_start = index + self._own_random.randint(0, round(2 * mean))
            self._own_end = self._own_start + sampling.own_window
        if index < self._own_start:
            return Span(False, min(until, self._own_start), False)
        return Span(False, min(until, self._own_end), True)

    def reads_memory(self, index: int, run_end: int) -> bool:
        """Whether detailed step ``index`` reads memory: each step while every step is detailed (warm-up, the first
        ``first``), then only the last of each window (``run_end``: where its run of detailed steps ends). A reading
        is a system call on a CPU (the RSS), about 13 µs inside a training loop; on a GPU it is the peak since the
        window opened, so the window's peak either way."""
        return self.sampling.share >= 1 or index < self._always_until or index + 1 >= run_end

    def _gap(self) -> int:
        """Steps between windows: uniform around the mean that gives ``share`` (``later_share`` after ``enough``)."""
        sampling = self.sampling
        share = sampling.share if self._sampled < sampling.enough else sampling.later_share
        mean = sampling.window / share - sampling.window
        return self._random.randint(0, round(2 * mean))


class OwnTime:
    """The time the loop spends inside gpufly's code: each hook, wrapper and bookkeeping call adds what it took,
    read from the profiler's clock at its entry and its exit. ``take`` hands over what the current step spent.

    The step clock's per-step paths do what ``add`` and ``take`` do themselves, without the calls: they run on
    every step."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.calls = 0
        self.step_s = 0.0
        """Spent since the last ``take``."""
        self.taken_s = 0.0
        """Spent up to the last ``take``."""

    @property
    def spent_s(self) -> float:
        """The whole run's own time."""
        return self.taken_s + self.step_s

    def add(self, seconds: float) -> None:
        self.step_s += seconds
        self.calls += 1

    def since(self, entered: float) -> None:
        """Add the time from ``entered`` (a reading of the same clock) to now."""
        self.add(self.clock() - entered)

    def take(self) -> float:
        """The time spent since the last ``take`` (the step that is closing)."""
        spent, self.step_s = self.step_s, 0.0
        self.taken_s += spent
        return spent
