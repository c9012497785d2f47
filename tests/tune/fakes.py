"""A fake machine for the tuner's tests: a runner whose truth is known, with noise, drift and accuracy costs."""

from __future__ import annotations

import math
import random

from gpufly.tune import Trial, TrialResult


class FakeMachine:
    """A runner with a known truth. Each knob multiplies the baseline's 100 samples/s by its ``speeds`` entry;
    every run's throughput is multiplied by lognormal noise of spread ``noise`` and by the machine's drift (each
    run ``drift`` slower than the one before). The probe loss after ``steps`` steps is 0.5, plus a knob's
    ``costs``, plus the seed's own effect, which fades with the steps (``seed_spread / steps`` per seed).
    ``runs`` counts every run, baseline included. With ``timed``, each run also reports the figures a real run
    measures beside its throughput, each tied to it (the median step 1.5 times it, the seconds 1,000 over it, the
    data-wait share a thousandth of it), so a row whose figures came from different runs shows; ``results`` keeps
    every run's result."""

    def __init__(self, speeds: dict[str, float], *, noise: float = 0.0, drift: float = 0.0,
                 costs: dict[str, float] | None = None, steps: int = 40, seed_spread: float = 0.0,
                 rng_seed: int = 0, timed: bool = False) -> None:
        self.speeds, self.noise, self.drift, self.costs = speeds, noise, drift, costs or {}
        self.steps, self.seed_spread, self.timed = steps, seed_spread, timed
        self.rng = random.Random(rng_seed)
        self.runs: list[str] = []
        self.results: list[TrialResult] = []

    def __call__(self, trial: Trial) -> TrialResult:
        self.runs.append(trial.name)
        speed = 100.0 * math.prod(self.speeds.get(knob, 1.0) for knob in trial.knobs)
        speed *= math.exp(self.rng.gauss(0.0, self.noise)) * (1.0 - self.drift) ** len(self.runs)
        loss = 0.5 + sum(self.costs.get(knob, 0.0) for knob in trial.knobs)
        loss += trial.seed * self.seed_spread / self.steps
        result = TrialResult(trial.name, trial.knobs, "ok", throughput=speed, eval_loss=loss, losses=[2 * loss, loss],
                             seed=trial.seed)
        if self.timed:
            result.median_step_throughput, result.seconds = 1.5 * speed, 1000.0 / speed
            result.data_wait_share = speed / 1000.0
        self.results.append(result)
        return result
