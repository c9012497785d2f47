"""Which steps the profiler looks inside, and what its own code costs the loop.

Counting syncs means wrapping ``torch.Tensor`` methods, and every wrapped call then costs about a microsecond
and a half more (five on a tensor that requires grad; CPU Adam calls ``.item()`` once per parameter per step);
timing the forward pass puts the model on ``nn.Module``'s slower call path. Paid on every step that came to
8-16% of a 1 ms step. So the profiler looks inside only some steps: every warm-up step and the first ``first``
measured ones, then windows of ``window`` consecutive steps at random places (a fixed period would line up
with a loop that logs every N steps), about ``share`` of the steps in all. Wall time, data wait and batch size
are measured on every step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    """How many steps are detailed: all of the first ``first`` after warm-up, then ``share`` of the rest in
    windows of ``window`` steps. ``share=1`` details every step (what tests that count exact calls use)."""

    first: int = 8
    window: int = 4
    share: float = 1 / 16

    def __post_init__(self) -> None:
        if self.first < 0 or self.window < 1 or not 0 < self.share <= 1:
            raise ValueError("Sampling needs first >= 0, window >= 1 and 0 < share <= 1")


DEFAULT_SAMPLING = Sampling()
EVERY_STEP = Sampling(first=0, window=1, share=1.0)


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
        self._window_end = 0
        self._next_start = self._always_until + self._gap()

    def detailed(self, index: int) -> bool:
        if self.sampling.share >= 1 or index < self._always_until or index < self._window_end:
            return True
        if index >= self._next_start:
            self._window_end = index + self.sampling.window
            self._next_start = self._window_end + self._gap()
            return True
        return False

    def _gap(self) -> int:
        """Steps between windows: uniform around the mean that gives ``share``."""
        mean = self.sampling.window / self.sampling.share - self.sampling.window
        return self._random.randint(0, round(2 * mean))


class OwnTime:
    """The time the loop spends inside gpufly's code: each hook, wrapper and bookkeeping call adds what it took,
    read from the profiler's clock at its entry and its exit. ``take`` hands over what the current step spent."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.spent_s = 0.0
        self.calls = 0
        self._step_s = 0.0

    def add(self, seconds: float) -> None:
        self.spent_s += seconds
        self._step_s += seconds
        self.calls += 1

    def since(self, entered: float) -> None:
        """Add the time from ``entered`` (a reading of the same clock) to now."""
        self.add(self.clock() - entered)

    def take(self) -> float:
        """The time spent since the last ``take`` (the step that is closing)."""
        spent, self._step_s = self._step_s, 0.0
        return spent
