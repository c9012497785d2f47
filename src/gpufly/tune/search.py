"""The search: which trials to run, in what order, and which configuration wins, confirmed before it is named.

One ``Search`` runs every tuning run: it measures each trial through its runner (a subprocess in real runs, a
fake in tests), judges it against the baseline, appends it to the results file as it ends, skips trials the
file already holds (``--resume``), stops starting trials when the budget is spent, and reports each result.
What to try comes from a *plan*:

- ``GreedyPlan``, the generic search: the baseline; then each knob alone from the baseline, in a shuffled
  order; the ones that helped and stayed safe are combined greedily, fastest first, each kept only if the
  combination measures faster.
- ``StagePlan``, a case study (``gpufly tune recsys``): cumulative stages, each adding its knobs to the last
  stage kept and each judged against the baseline, so an unsafe stage, or one slower than the stage it built on
  beyond the noise, is shown and not carried.

Whatever the plan, the search does not believe one run:

- the baseline trains twice, with two seeds: a measure of accuracy (probe loss, metric) that the seed alone
  moves by half its tolerance or more cannot judge a knob at this step count (``gpufly.tune.verdict.judgeable``);
- the baseline runs again after every ``remeasure_every`` trials, so its runs span the whole search: their
  spread is the noise floor, and each trial is compared with the baseline's throughput interpolated between
  the runs just before and just after it, so a machine that slows down (or warms up) over the run favours
  neither the first trials nor the last;
- the ``confirm_top`` fastest candidates then run against the baseline in ``rounds`` A/B rounds (B/A every
  other round), and the interval of the per-round ratios is the speedup printed.

The winner is ``best(results)`` (``gpufly.tune.verdict.decide``), the same choice ``gpufly report`` and
``gpufly.apply`` make from the file: none when the machine was too noisy or the rounds could not tell.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufly.tune.knobs import BY_NAME, Ddp
from gpufly.tune.noise import geometric_mean, interpolate, noise_floor, ratio_interval
from gpufly.tune.results import ResultsLog
from gpufly.tune.trial import Runner, Trial, TrialResult
from gpufly.tune.verdict import (
    DRIFT_TOLERANCE,
    MAX_NOISE_FLOOR,
    METRIC_TOLERANCE,
    MIN_GAIN,
    Decision,
    accuracy_unjudgeable,
    best,
    decide,
    judge,
    loss_drift,
    metric_drop,
)

MAX_BATCH_GROWTH = 16
"""The largest batch tried is at most this many times the baseline's (a trial takes as many fewer steps)."""
REMEASURE_EVERY = 2
"""Trials between two runs of the baseline: every trial has a baseline run beside it on one side and one at most
two trials away on the other, for half again the trials' cost."""
CONFIRM_TOP = 2
"""Candidates confirmed by A/B rounds: the fastest, and the next in case the first was lucky in the search."""
CONFIRM_ROUNDS = 3
"""A/B rounds per candidate, on top of its search run: four ratios, whose t interval (3 degrees of freedom) is
about 1.6 times their standard deviation wide on each side: a 10% gain on a machine with a 3% noise floor clears
1x."""
SECOND_SEED = 1
"""The baseline's second seed (every trial trains with seed 0)."""


class Plan(Protocol):
    """What to try: ``run`` asks the search to measure trials and decides the next from the results."""

    def expected_trials(self) -> int:
        """About how many trials the plan runs (for a progress bar)."""
        ...

    def run(self, search: Search) -> None:
        ...


@dataclass
class Search:
    """One tuning run; ``results`` in the order they were decided (the baseline's second seed among them)."""

    plan: Plan
    log: ResultsLog
    runner: Runner
    identity: dict[str, Any] | None = None
    """The run's identity (``run_identity``): written as the results file's header, checked on resume."""
    budget_s: float | None = None
    """No trial of the plan starts after this many seconds (None: no limit); the confirmation rounds still run,
    since a winner is never named unconfirmed."""
    tolerance: float = DRIFT_TOLERANCE
    metric_tolerance: float = METRIC_TOLERANCE
    remeasure_every: int = REMEASURE_EVERY
    confirm_top: int = CONFIRM_TOP
    rounds: int = CONFIRM_ROUNDS
    on_result: Callable[[TrialResult], None] | None = None
    clock: Callable[[], float] = time.monotonic
    results: list[TrialResult] = field(default_factory=list)
    baseline: TrialResult | None = field(init=False, default=None)
    _started: float = field(init=False, default=0.0)
    _done: dict[str, TrialResult] = field(init=False, default_factory=dict)
    _measured: dict[str, TrialResult] = field(init=False, default_factory=dict)
    _position: int = field(init=False, default=0)
    _timeline: list[tuple[int, float]] = field(init=False, default_factory=list)
    """This session's baseline runs: (position in the run, throughput)."""
    _pending: list[tuple[int, TrialResult]] = field(init=False, default_factory=list)
    """Trials run since the last baseline run, waiting for the next to be compared with."""
    _resumed: set[int] = field(init=False, default_factory=set)
    """The results taken from the results file (their ``id``): what the first run decided on them stands."""

    def run(self) -> TrialResult | None:
        """Run the plan, then confirm the fastest candidates; the winner (``best``), or None when the baseline
        failed or the run could not decide (``decision`` says which)."""
        self._started = self.clock()
        if self.identity is not None:
            self.log.start(self.identity)
        self._done = self.log.done()
        self.plan.run(self)
        self.settle()
        self.confirm()
        return best(self.results)

    def decision(self) -> Decision:
        return decide(self.results)

    def can_judge(self) -> bool:
        """Whether the baseline ran and its two seeds agree enough to judge a knob's accuracy: when they do not,
        no trial could be called safe, so the plan runs none (the decision says why, with the step count)."""
        return (self.baseline is not None and self.baseline.usable
                and accuracy_unjudgeable(self.baseline) is None)

    def measure(self, trial: Trial, baseline: TrialResult | None, stage: str | None = None) -> TrialResult:
        """The trial's judged result: from the results file when it is there, else run, judged and appended.
        With ``baseline`` None the trial is the baseline (trained again with a second seed).

        A configuration this search measured already is not run, listed or reported again, however the plan
        reached it (a greedy combination can add nothing to a single trial: ``ddp=2`` chosen, then the
        candidate ``ddp=2 + ddp_hook=fp16`` combines into that very trial); its first result is returned.
        Its speedup is final once the baseline has run after it (``settle``)."""
        earlier = self._measured.get(trial.key)
        if earlier is not None:
            return earlier
        result = self._done.get(trial.key)
        if result is None:
            result = self._baseline_run(trial) if baseline is None else self._trial_run(trial, baseline)
            result.stage = stage
            self.log.append(result)
        else:
            self._resumed.add(id(result))
            result.stage = stage  # a file written before trials recorded their stage
            if baseline is None:
                result.role = "baseline"
        self._record(trial, result)
        if baseline is None:
            self.baseline = result
            if result.usable:
                self._second_seed(result)
        return result

    def decides_anew(self, result: TrialResult) -> bool:
        """Whether a plan's decision on ``result`` (a stage's ``dropped``) is to be made now: always on a trial run in
        this search; on one from the results file only where its line may predate the decision (it failed, or its
        speedup was still waiting for the baseline's next run). A decision rests on the noise floor of its moment,
        and a resumed run knows only the last one: made again, it could build the next stages on another chain and
        run them anew (a loaded machine's floor went from 2.7% to 121% over one run)."""
        return id(result) not in self._resumed or not result.usable or result.rounds == 0

    def _record(self, trial: Trial, result: TrialResult) -> None:
        self._measured[trial.key] = result
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)

    def _run(self, trial: Trial) -> TrialResult:
        self._position += 1
        return self.runner(trial)

    def _baseline_run(self, trial: Trial) -> TrialResult:
        result = judge(self._run(trial), None)
        if result.usable and result.throughput is not None:
            _first_run(result)
            self._timeline.append((self._position, result.throughput))
        return result

    def _trial_run(self, trial: Trial, baseline: TrialResult) -> TrialResult:
        """A trial of the plan, with the baseline run again first when its last run is too far back."""
        if not self._timeline or len(self._pending) >= self.remeasure_every:
            self._remeasure()
        result = judge(self._run(trial), baseline, self.tolerance, self.metric_tolerance)
        if result.status in ("ok", "unsafe") and result.throughput is not None:  # unsafe: shown at its true speed
            _first_run(result)
            self._pending.append((self._position, result))
        return result

    def _second_seed(self, baseline: TrialResult) -> None:
        """The baseline with another seed: its probe loss says how far the seed alone moves it, its throughput is
        one more baseline run."""
        trial = Trial(f"{baseline.name} (seed {SECOND_SEED})", baseline.knobs, seed=SECOND_SEED)
        seeded = self._done.get(trial.key)
        if seeded is not None:
            self._record(trial, seeded)
            return
        seeded = self._run(trial)
        seeded.role, seeded.stage, seeded.seed = "seed", baseline.stage, SECOND_SEED
        if seeded.usable:
            seeded.loss_drift = loss_drift(seeded.eval_loss, baseline.eval_loss)
            seeded.metric_drop = metric_drop(seeded.eval_metric, baseline.eval_metric, baseline.higher_is_better)
            if seeded.losses and seeded.losses == baseline.losses:
                seeded.error = ("the same losses as seed 0: the workload sets its own seed, so no seed drift is "
                                "known (leave the seed to the tuner: no torch.manual_seed in the factory)")
            else:
                baseline.seed_loss_drift = seeded.loss_drift
                baseline.seed_metric_drift = None if seeded.metric_drop is None else abs(seeded.metric_drop)
            if seeded.throughput:
                self._baseline_measured(seeded)
        self.log.append(seeded)
        self._record(trial, seeded)
        self.log.append(baseline)

    def _remeasure(self) -> None:
        """Run the baseline again: one more point of the noise floor, and the reference of the trials since."""
        baseline = self.baseline
        if baseline is None or not baseline.usable:
            return
        again = self._run(Trial(baseline.name, baseline.knobs))
        self.baseline_ran(again)

    def baseline_ran(self, run: TrialResult) -> None:
        """Another run of the baseline (its own seed), made by the plan or the search: when it measured a
        throughput, one more point of the noise floor, a run the baseline's row may show, and the reference of the
        trials waiting for it; the baseline's line is written again."""
        baseline = self.baseline
        if baseline is None or not run.usable or not run.throughput:
            return
        self._baseline_measured(run)
        self.log.append(baseline)

    def _baseline_measured(self, run: TrialResult) -> None:
        """A baseline run at this position: the floor updated, the row's figures the median run's (a run with the
        baseline's own seed), the waiting trials settled."""
        baseline = self.baseline
        if baseline is None or run.throughput is None:
            return
        self._timeline.append((self._position, run.throughput))
        baseline.throughputs.append(run.throughput)
        if run.seed == baseline.seed:
            baseline.add_run(run)
        baseline.noise_floor = noise_floor(baseline.throughputs)
        for position, result in self._pending:
            self._compare(result, position)
            self.log.append(result)
        self._pending.clear()

    def _compare(self, result: TrialResult, position: int) -> None:
        """The trial's speedup over the baseline as it ran around it, and that one pair's interval."""
        before = max((p for p in self._timeline if p[0] < position), default=None)
        after = min((p for p in self._timeline if p[0] > position), default=None)
        if before is None or result.throughput is None:
            return
        beside = interpolate(before, after, position)
        result.speedup = result.throughput / beside
        result.paired_throughput, result.paired_baseline, result.pairs = result.throughput, beside, 1
        result.search_speedup = result.speedup
        floor = None if self.baseline is None else self.baseline.noise_floor
        runs = 0 if self.baseline is None else len(self.baseline.throughputs)
        interval = ratio_interval([result.speedup], floor, runs)
        if interval is not None:
            result.speedup_low, result.speedup_high = interval.low, interval.high
        result.rounds = 1

    def settle(self) -> None:
        """Run the baseline once more if trials wait for it, so every speedup so far is final."""
        if self._pending:
            self._remeasure()

    def confirm(self) -> None:
        """The ``confirm_top`` fastest safe trials, each against the baseline in A/B rounds."""
        baseline = self.baseline
        if not self.can_judge() or baseline is None or (baseline.noise_floor or 0.0) > MAX_NOISE_FLOOR:
            return  # no winner can be named: rounds would not change that
        ranked = sorted((r for r in self.results if r.role == "trial" and r.usable and r.rounds >= 1
                         and decided_on(r) >= MIN_GAIN), key=lambda r: -decided_on(r))
        for candidate in ranked[:self.confirm_top]:
            if candidate.rounds == 1:  # not confirmed yet (a resumed run's may be)
                self._rounds(candidate, baseline)

    def _rounds(self, candidate: TrialResult, baseline: TrialResult) -> None:
        """A/B rounds of ``candidate`` against the baseline (B/A every other round, so neither always runs second);
        the speedup becomes the geometric mean of the rounds' ratios (its search run's included), with its
        interval. A round that fails leaves the candidate unconfirmed, with the reason."""
        ratios = [candidate.speedup or 0.0]
        first = candidate.paired_throughput or candidate.throughput or 0.0
        mine, beside = [first], [candidate.paired_baseline or first / (candidate.speedup or 1.0)]
        for number in range(self.rounds):
            pair = [(baseline, "base"), (candidate, "candidate")]
            measured: dict[str, TrialResult] = {}
            for result, which in pair if number % 2 == 0 else pair[::-1]:
                run = self._run(Trial(result.name, result.knobs))
                if not run.usable or not run.throughput:
                    candidate.error = f"A/B round {number + 1} failed ({run.status}): {run.error or 'no throughput'}"
                    self.log.append(candidate)
                    return
                measured[which] = run
            base, ran = measured["base"], measured["candidate"]
            self._baseline_measured(base)
            candidate.throughputs.append(ran.throughput or 0.0)
            candidate.add_run(ran)
            mine.append(ran.throughput or 0.0)
            beside.append(base.throughput or 0.0)
            ratios.append(mine[-1] / beside[-1])
        interval = ratio_interval(ratios, baseline.noise_floor, len(baseline.throughputs))
        if interval is not None:
            candidate.speedup, candidate.speedup_low, candidate.speedup_high = (interval.estimate, interval.low,
                                                                                interval.high)
        candidate.paired_throughput, candidate.paired_baseline = geometric_mean(mine), geometric_mean(beside)
        candidate.rounds = candidate.pairs = len(ratios)
        self.log.append(candidate)
        self.log.append(baseline)

    def out_of_time(self) -> bool:
        return self.budget_s is not None and self.clock() - self._started > self.budget_s


def _first_run(result: TrialResult) -> None:
    """A configuration's first run: its throughput the first of its list, its figures the first of its runs."""
    result.throughputs = [result.throughput or 0.0]
    result.runs, result.shown_run = [result.timed()], 1


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
    order_seed: int = 0
    """Seeds the shuffle of the single-knob trials (fixed, so a resumed run follows the same order)."""

    def expected_trials(self) -> int:
        return 1 + sum(len(values) for values in self.knobs.values())

    def run(self, search: Search) -> None:
        baseline = self._measure(search, Trial("baseline", {}), None)
        if not search.can_judge():
            return
        knobs = self._with_fitting_batch(baseline)
        order = list(_single_knobs(knobs))
        random.Random(self.order_seed).shuffle(order)
        singles = [self._measure(search, trial, baseline) for trial in order if not search.out_of_time()]
        search.settle()
        helpful = sorted((r for r in singles if r.usable and decided_on(r) >= MIN_GAIN), key=lambda r: -decided_on(r))
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
            search.settle()
            if combined.usable and decided_on(combined) > decided_on(chosen):
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


def decided_on(result: TrialResult) -> float:
    """The speedup a plan decides on: the search's own run's, not the one A/B rounds refined later, which a resumed
    run would read from the file (the greedy order, and so the combinations run, would then differ)."""
    speedup = result.search_speedup if result.search_speedup is not None else result.speedup
    return speedup or 0.0


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


SLOWER_SIGMAS = 2.0
"""A stage is slower than the stage it built on beyond the noise when their ratio falls this many standard
deviations of a two-run ratio (the noise floor times sqrt 2) below 1x, and by more than ``MIN_GAIN`` allows."""


def slower_beyond_noise(ratio: float, floor: float | None) -> bool:
    """Whether a throughput ``ratio`` (a stage over the stage it built on) is below 1x by more than the noise:
    ``SLOWER_SIGMAS`` two-run standard deviations at the noise floor ``floor``, and at least the ``MIN_GAIN`` a
    change must bring (None: no floor measured, only that).

    >>> slower_beyond_noise(13.2 / 29.5, 0.05), slower_beyond_noise(0.98, 0.0), slower_beyond_noise(0.9, 0.05)
    (True, False, False)
    """
    limit = 1.0 / MIN_GAIN
    if floor is not None:
        limit = min(limit, math.exp(-SLOWER_SIGMAS * math.sqrt(2.0) * floor))
    return ratio < limit


@dataclass(frozen=True)
class StagePlan:
    """Cumulative stages, the first being the baseline: each adds its knobs to the last stage *kept*, and each is
    judged against the baseline. A stage is kept (the stages after it build on it) when it ran, was not found
    unsafe and is not slower than the stage it built on beyond the noise (``slower_beyond_noise``); a stage that is
    not kept is shown with why (``TrialResult.dropped``). When the baseline fails there is nothing to compare
    against. Unlike the search, the stages all run when two seeds leave accuracy unjudged (the table is the case
    study; each stage's accuracy is then *unjudged*, not safe, no stage is named best, and none confirmed)."""

    stages: Sequence[Stage]

    def expected_trials(self) -> int:
        return len(self.stages)

    def run(self, search: Search) -> None:
        kept: TrialResult | None = None
        for stage in self.stages:
            carried = {} if kept is None else dict(kept.knobs)
            result = search.measure(Trial(stage.label, {**carried, **stage.adds}), search.baseline if kept else None,
                                    stage.stage)
            if kept is None:
                if not result.usable:
                    return
                kept = result  # a case study shows every stage, even where accuracy cannot be judged
                continue
            if search.decides_anew(result):
                result.dropped = dropped(result, kept, search.baseline)
            if result.dropped is None:
                kept = result


def dropped(result: TrialResult, built_on: TrialResult, baseline: TrialResult | None) -> str | None:
    """Why the stages after ``result`` do not build on it, or None when they do: it failed, it was found unsafe,
    or it is slower than ``built_on`` beyond the baseline's noise floor."""
    if not result.usable:
        return result.status  # unsafe, oom, failed, timeout
    floor = None if baseline is None else baseline.noise_floor
    if result.speedup is not None and built_on.speedup:
        if slower_beyond_noise(result.speedup / built_on.speedup, floor):
            return f"slower than the stage it built on ({result.speedup:.2f}x after {built_on.speedup:.2f}x)"
    elif (result.throughput is not None and built_on.throughput
          and slower_beyond_noise(result.throughput / built_on.throughput, floor)):
        return (f"slower than the stage it built on ({result.throughput:,.0f} after "
                f"{built_on.throughput:,.0f} {result.unit}/s)")
    return None
