"""The search: which trials to run, in what order, and which configuration wins.

One ``Search`` runs every tuning run: it measures each trial through its runner (a subprocess in real runs, a
fake in tests), judges it against the baseline, appends it to the results file as it ends, skips trials the
file already holds (``--resume``), stops starting trials when the budget is spent, and reports each result.
What to try comes from a *plan*:

- ``GreedyPlan``, the generic search: the baseline; then each knob alone from the baseline; the ones that
  helped and stayed safe are combined greedily, fastest first, each kept only if the combination measures
  faster.
- ``StagePlan``, a case study (``gpufly tune recsys``): cumulative stages, each adding its knobs to the last
  stage that stayed safe and each judged against the baseline, so an unsafe stage is shown and not carried.

The winner is ``best(results)``, the same choice ``gpufly report`` and ``gpufly.apply`` make from the file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufly.tune.knobs import BY_NAME, Ddp
from gpufly.tune.results import ResultsLog
from gpufly.tune.trial import Runner, Trial, TrialResult
from gpufly.tune.verdict import DRIFT_TOLERANCE, METRIC_TOLERANCE, MIN_GAIN, best, judge

MAX_BATCH_GROWTH = 16
"""The largest batch tried is at most this many times the baseline's (a trial takes as many fewer steps)."""


class Plan(Protocol):
    """What to try: ``run`` asks the search to measure trials and decides the next from the results."""

    def expected_trials(self) -> int:
        """About how many trials the plan runs (for a progress bar)."""
        ...

    def run(self, search: Search) -> None:
        ...


@dataclass
class Search:
    """One tuning run; ``results`` in the order they were decided."""

    plan: Plan
    log: ResultsLog
    runner: Runner
    identity: dict[str, Any] | None = None
    """The run's identity (``run_identity``): written as the results file's header, checked on resume."""
    budget_s: float | None = None
    """No trial starts after this many seconds (None: no limit)."""
    tolerance: float = DRIFT_TOLERANCE
    metric_tolerance: float = METRIC_TOLERANCE
    on_result: Callable[[TrialResult], None] | None = None
    clock: Callable[[], float] = time.monotonic
    results: list[TrialResult] = field(default_factory=list)
    _started: float = field(init=False, default=0.0)
    _done: dict[str, TrialResult] = field(init=False, default_factory=dict)
    _measured: dict[str, TrialResult] = field(init=False, default_factory=dict)

    def run(self) -> TrialResult | None:
        """Run the plan; the best safe result (the baseline when nothing beat it), None when the baseline failed."""
        self._started = self.clock()
        if self.identity is not None:
            self.log.start(self.identity)
        self._done = self.log.done()
        self.plan.run(self)
        return best(self.results)

    def measure(self, trial: Trial, baseline: TrialResult | None, stage: str | None = None) -> TrialResult:
        """The trial's judged result: from the results file when it is there, else run, judged and appended.

        A configuration this search measured already is not run, listed or reported again, however the plan
        reached it (a greedy combination can add nothing to a single trial: ``ddp=2`` chosen, then the
        candidate ``ddp=2 + ddp_hook=fp16`` combines into that very trial); its first result is returned."""
        earlier = self._measured.get(trial.key)
        if earlier is not None:
            return earlier
        result = self._done.get(trial.key)
        if result is None:
            result = judge(self.runner(trial), baseline, self.tolerance, self.metric_tolerance)
            result.stage = stage
            self.log.append(result)
        else:
            result.stage = stage  # a file written before trials recorded their stage
        self._measured[trial.key] = result
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)
        return result

    def out_of_time(self) -> bool:
        return self.budget_s is not None and self.clock() - self._started > self.budget_s


def named(knobs: dict[str, Any]) -> Trial:
    """A trial named by its knobs: ``a=True + b=2``."""
    return Trial(" + ".join(f"{k}={v}" for k, v in knobs.items()), knobs)


@dataclass
class GreedyPlan:
    """The generic search over ``knobs`` (name to the values to try; each knob's baseline is its absence)."""

    knobs: dict[str, list[Any]]
    fixed: dict[str, Any] = field(default_factory=dict)
    """Knobs every trial carries, the baseline included (``{"task": "infer"}`` for serving)."""
    steps: int | None = None
    """The baseline-sized steps each trial trains: a batch over ``steps / 4`` times the baseline's would leave
    fewer than 4 steps on the same samples, so such batches are not tried (None: no limit)."""

    def expected_trials(self) -> int:
        return 1 + sum(len(values) for values in self.knobs.values())

    def run(self, search: Search) -> None:
        baseline = self._measure(search, Trial("baseline", {}), None)
        if not baseline.usable:
            return
        knobs = self._with_fitting_batch(baseline)
        singles = [self._measure(search, trial, baseline) for trial in _single_knobs(knobs)
                   if not search.out_of_time()]
        helpful = sorted((r for r in singles if r.usable and (r.speedup or 0) >= MIN_GAIN),
                         key=lambda r: -(r.speedup or 0))
        if helpful:
            self._combine(search, helpful, baseline)

    def _combine(self, search: Search, helpful: list[TrialResult], baseline: TrialResult) -> None:
        """Add each helpful knob to the best so far, fastest first; keep it when the combination is faster."""
        chosen = helpful[0]
        for candidate in helpful[1:]:
            if search.out_of_time():
                return
            if any(chosen.knobs[k] != v for k, v in candidate.knobs.items() if k in chosen.knobs):
                continue  # another value of a knob already chosen (fused after foreach): not a combination
            current = self._own(chosen.knobs)
            knobs = self._own({**chosen.knobs, **candidate.knobs})
            if knobs == current:
                continue  # nothing new (ddp=2 after ddp=2 + ddp_hook=fp16)
            combined = self._measure(search, named(knobs), baseline)
            if combined.usable and (combined.throughput or 0) > (chosen.throughput or 0):
                chosen = combined

    def _own(self, knobs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in knobs.items() if k not in self.fixed}

    def _measure(self, search: Search, trial: Trial, baseline: TrialResult | None) -> TrialResult:
        return search.measure(Trial(trial.name, {**self.fixed, **trial.knobs}), baseline)

    def _with_fitting_batch(self, baseline: TrialResult) -> dict[str, list[Any]]:
        """The knobs to try after the baseline: on a GPU, also the largest batch its measured memory says fits;
        without the batches that would leave fewer than 4 steps of the run's samples."""
        tried = self.knobs.get("batch_size")
        if tried is None:
            return self.knobs
        growth = MAX_BATCH_GROWTH if self.steps is None else min(MAX_BATCH_GROWTH, self.steps / 4)
        fit = fitting_batch(baseline.batch_size, baseline.peak_memory_bytes, baseline.device_memory_bytes,
                            max_growth=growth)
        if baseline.batch_size and self.steps is not None:
            tried = [b for b in tried if b <= baseline.batch_size * growth]
        if fit is not None and (not tried or fit > max(tried)):
            tried = [*tried, fit]
        return {k: tried if k == "batch_size" else v for k, v in self.knobs.items() if k != "batch_size" or tried}


def _single_knobs(knobs: dict[str, list[Any]]) -> Iterable[Trial]:
    """Each knob value alone; a DDP-only knob (a hook, a bucket size) together with the ddp knob."""
    for name, values in knobs.items():
        for value in values:
            alone = {name: value}
            if name in BY_NAME and BY_NAME[name].needs_ddp and knobs.get(Ddp.name):
                alone = {Ddp.name: max(knobs[Ddp.name]), name: value}
            yield named(alone)


def fitting_batch(batch: int | None, peak_bytes: int | None, device_bytes: int | None,
                  headroom: float = 0.85, max_growth: float = MAX_BATCH_GROWTH) -> int | None:
    """The largest power-of-two multiple of the baseline batch that fits in the GPU, from the baseline's
    measured peak memory. All of the peak is taken to grow with the batch; the weights and optimizer
    state do not, so this errs towards batches that fit, and the trial confirms it (an OOM is recorded).

    >>> fitting_batch(32, 10 * 2**30, 141 * 2**30), fitting_batch(32, 60 * 2**30, 80 * 2**30)
    (256, None)
    """
    if not batch or not peak_bytes or not device_bytes:
        return None
    growth = min(headroom * device_bytes / peak_bytes, MAX_BATCH_GROWTH, max_growth)
    multiple = 1
    while multiple * 2 <= growth:
        multiple *= 2
    return batch * multiple if multiple >= 2 else None


@dataclass(frozen=True)
class Stage:
    """One step of a case study: its label (the trial's name), its kind, and the knobs it adds."""

    label: str
    stage: str
    """baseline, data, compute or communication."""
    adds: dict[str, Any]
    """The knobs this stage adds to the last safe stage's."""


@dataclass(frozen=True)
class StagePlan:
    """Cumulative stages, the first being the baseline: each adds its knobs to the last stage that stayed safe,
    and each is judged against the baseline. When the baseline fails there is nothing to compare against."""

    stages: Sequence[Stage]

    def expected_trials(self) -> int:
        return len(self.stages)

    def run(self, search: Search) -> None:
        baseline: TrialResult | None = None
        carried: dict[str, Any] = {}
        for stage in self.stages:
            result = search.measure(Trial(stage.label, {**carried, **stage.adds}), baseline, stage.stage)
            if baseline is None:
                if not result.usable:
                    return
                baseline = result
            if result.usable:
                carried = dict(result.knobs)
