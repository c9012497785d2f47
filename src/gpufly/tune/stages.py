"""The recommender case study as a staged plan: data, then compute, then communication, stage by stage.

`gpufly tune recsys` and benchmarks/tune_speedups.py both run these stages through the tuner's one
``Search`` (``StagePlan``). Each stage is a real trial of the built-in ``recsys`` workload through the same
worker as any tuner trial (its own process, a timeout, the throughput over the measured steps, the same
training samples), so the table measures the pipeline a user would run, not a special benchmark loop. The stages are
cumulative: each adds its knobs to the last stage kept, so a change that costs accuracy (a bigger batch whose
learning rate is off), or one that makes the pipeline slower beyond the noise (a loader worker competing with the
compute on a small CPU), is shown, marked "not built on" and not carried into the stages after it. Where two seeds
of the baseline end too far apart to judge accuracy, every stage's verdict is ``unjudged``, never ``safe``.

The yardstick is a reference row: the loop a competent PyTorch engineer writes by hand
(``gpufly.tune.workloads.recsys_reference``), run by the same worker, never carried into a stage and never a
candidate for the best stage. After the stages it runs in rounds beside the baseline (its row's speedup is the
geometric mean of its ratios to the baseline run in each round, with their 95% interval, as a confirmed stage's),
the fastest safe stage and the fastest safe stage at its own batch, and ``CaseStudy.comparisons`` hold each one's
throughput over the reference's, with the 95% interval of the rounds' ratios.

How close a stage comes to the machine is its share of the memory-bandwidth limit: the bytes a sample must move
(``Traffic``: its embedding rows read and updated, its inputs, its share of the MLP's update) against the
machine's measured copy bandwidth (gpufly bench's memory.copy, the median of several copies with its interval;
``benchmarks/tune_speedups.py`` measures it too).

Cost-performance is samples per dollar: the throughput over an hour divided by the machine's price
per hour, given, or on a GPU the catalog prices, its launch price spread over three years of hours.

Torch-free at import: the trials import torch in their own processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufly.tune.noise import Interval, geometric_mean, ratio_interval
from gpufly.tune.search import CONFIRM_ROUNDS, Search, Stage, StagePlan
from gpufly.tune.trial import Trial, TrialResult
from gpufly.tune.verdict import decide, judge

WORKLOAD = "recsys"
REFERENCE = Stage("reference: hand-written loop (EmbeddingBag sparse + SparseAdam, Adam, batch 256)", "reference",
                  {"reference": True})
"""The yardstick's row: its own knobs only, whatever the stages carried."""


def stages(processes: int = 2, cuda: bool = False) -> CaseStudy:
    """The case study's stages, in order, and the reference row; the last stage runs DDP over ``processes``
    processes. ``cuda`` adds the stages that only pay on a GPU (pinned, prefetched batches; compiled MLPs: on a
    CPU, compiling takes longer than the whole trial)."""
    gpu = [Stage("+ pinned memory, 4 batches prefetched", "data", {"pin_memory": True, "prefetch_factor": 4}),
           Stage("+ torch.compile of the MLPs", "compute", {"compile_dense": True})] if cuda else []
    return CaseStudy(StagePlan((
        Stage("naive: per-sample dataset, dense Adam, batch 256", "baseline", {}),
        Stage("+ batched (vectorized) collation", "data", {"batched": True}),
        Stage("+ sparse embedding gradients, SparseAdam", "compute", {"sparse": True}),
        Stage("+ fused embedding bag, ids laid out once", "compute", {"fused": True}),
        Stage("+ fused Adam for the MLPs", "compute", {"optimizer_impl": "fused"}),
        Stage("+ batch 1024 (lr x4)", "compute", {"batch_size": 1024, "lr": 4e-3}),
        Stage("+ batch 2048 (lr x8)", "compute", {"batch_size": 2048, "lr": 8e-3}),
        Stage("+ 1 loader worker, persistent", "data", {"num_workers": 1}),
        *gpu,
        Stage(f"+ DDP over {processes} processes", "communication", {"ddp": processes}),
    )))


@dataclass(frozen=True)
class Comparison:
    """A safe stage against the hand-written loop, run beside each other in A/B rounds."""

    stage: str
    ratio: Interval
    """The stage's throughput over the reference's: the geometric mean of the rounds' ratios, 95% interval."""
    rounds: int

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "ratio": self.ratio.estimate, "interval": [self.ratio.low, self.ratio.high],
                "rounds": self.rounds}

    def text(self) -> str:
        """One line: the verdict first (matches, slower or faster), then the figures it rests on."""
        r = self.ratio
        verdict = "matches" if r.contains(1.0) else "is faster than" if r.low > 1.0 else "is slower than"
        return (f"{self.stage} {verdict} the hand-written loop: {r.estimate:.2f}x its throughput "
                f"(95% interval {r.low:.2f}-{r.high:.2f}x over {self.rounds} A/B rounds)")


REFERENCE_BATCH = 256
"""The hand-written loop's batch: the stage that runs it too is the like-for-like comparison."""


@dataclass
class CaseStudy:
    """The stages (a ``StagePlan``), then the reference row in ``rounds`` rounds beside the baseline, the stage the
    decision names (else the fastest safe stage) and the fastest safe stage at the reference's own batch (the
    like-for-like one, when it is another), the order rotated every round so that none always runs first. The
    reference row is measured through the search's runner, never through ``Search.measure``: it carries ``rounds``
    0 (its pairs with the baseline are in ``pairs``), so the search's confirmation and its decision never take the
    yardstick for a stage. ``comparisons`` are set when the rounds ran (not on a resume that finds the reference's
    row done)."""

    plan: StagePlan
    reference: Stage = REFERENCE
    rounds: int = CONFIRM_ROUNDS + 1
    comparisons: list[Comparison] = field(default_factory=list, init=False)

    @property
    def stages(self) -> tuple[Stage, ...]:
        return tuple(self.plan.stages)

    def expected_trials(self) -> int:
        return self.plan.expected_trials() + 1

    def run(self, search: Search) -> None:
        self.plan.run(search)
        search.settle()  # every stage's speedup final before the fastest is picked
        baseline = search.baseline
        if baseline is None or not baseline.usable:
            return
        trial = Trial(self.reference.label, dict(self.reference.adds))
        done = search.log.done().get(trial.key)
        if done is not None:
            self._record(search, done)
            return
        fastest = named_winner(search.results) or fastest_safe(search.results)
        like = fastest_safe(search.results, REFERENCE_BATCH)
        candidates = [c for c in (fastest, like) if c is not None]
        self._rounds(search, trial, list({c.name: c for c in candidates}.values()), baseline)

    def _rounds(self, search: Search, trial: Trial, candidates: list[TrialResult], baseline: TrialResult) -> None:
        """The reference, the baseline and the candidates, ``rounds`` times, the order rotated each round. Each round's
        baseline run is one more baseline run for the search (``Search.baseline_ran``) and the reference's pair: the
        reference's speedup is the geometric mean of its ratios to the baseline beside it, with their interval, as a
        confirmed stage's is. The row keeps its first run's accuracy, and shows its median run's timed figures."""
        lineup = [trial, Trial(baseline.name, baseline.knobs), *(Trial(c.name, c.knobs) for c in candidates)]
        runs: list[TrialResult] = []
        pairs: list[tuple[float, float]] = []
        ratios: dict[str, list[float]] = {c.name: [] for c in candidates}
        for number in range(self.rounds):
            shift = number % len(lineup)
            order = list(range(len(lineup)))[shift:] + list(range(len(lineup)))[:shift]
            measured = {index: search.runner(lineup[index]) for index in order}
            ref, base = measured[0], measured[1]
            search.baseline_ran(base)
            runs.append(ref)
            if not ref.usable or not ref.throughput:
                break
            if base.usable and base.throughput:
                pairs.append((ref.throughput, base.throughput))
            for index, run in measured.items():
                if index > 1 and run.usable and run.throughput:
                    ratios[lineup[index].name].append(run.throughput / ref.throughput)
        result = judge(runs[0], baseline, search.tolerance, search.metric_tolerance)  # rounds >= 1
        self._finish(search, result, [r for r in runs if r.usable and r.throughput], pairs)
        for name, values in ratios.items():
            interval = ratio_interval(values, None)
            if interval is not None:
                self.comparisons.append(Comparison(name, interval, len(values)))

    @staticmethod
    def _finish(search: Search, result: TrialResult, runs: list[TrialResult],
                pairs: list[tuple[float, float]]) -> None:
        """The reference's row: its median run's timed figures, its speedup over the baseline beside it with the
        interval of the pairs' ratios; no rounds (it is never a candidate)."""
        result.rounds, result.throughputs = 0, [r.throughput or 0.0 for r in runs]
        result.runs = [r.timed() for r in runs]
        result.show_median_run()
        baseline = search.baseline
        if pairs:
            mine, beside = [p[0] for p in pairs], [p[1] for p in pairs]
            floor = None if baseline is None else baseline.noise_floor
            interval = ratio_interval([a / b for a, b in pairs], floor,
                                      0 if baseline is None else len(baseline.throughputs))
            result.paired_throughput, result.paired_baseline = geometric_mean(mine), geometric_mean(beside)
            result.pairs = len(pairs)
            if result.paired_throughput and result.paired_baseline:
                result.speedup = result.paired_throughput / result.paired_baseline
            if interval is not None:
                result.speedup_low, result.speedup_high = interval.low, interval.high
        search.log.append(result)
        CaseStudy._record(search, result)

    @staticmethod
    def _record(search: Search, result: TrialResult) -> None:
        result.stage = REFERENCE.stage
        search.results.append(result)
        if search.on_result is not None:
            search.on_result(result)


def named_winner(results: list[TrialResult]) -> TrialResult | None:
    """The stage the run's decision names (``gpufly.tune.verdict.decide``), which a tie among confirmed stages can
    make another than the fastest point estimate: that is the one to set beside the hand-written loop."""
    decision = decide(results)
    winner = decision.winner
    return winner if decision.verdict == "faster" and winner is not None and winner.role == "trial" else None


def fastest_safe(results: list[TrialResult], batch_size: int | None = None) -> TrialResult | None:
    """The stage with the highest speedup so far among the safe ones (the baseline, its seed and the reference
    excluded; a stage whose accuracy could not be judged is not safe), at ``batch_size`` when one is given."""
    safe = [r for r in results if r.role == "trial" and r.usable and r.verdict == "safe" and r.speedup is not None
            and r.stage not in (None, REFERENCE.stage) and batch_size in (None, r.batch_size)]
    return max(safe, key=lambda r: r.speedup or 0.0, default=None)


FP32_BYTES = 4
ID_BYTES = 8
"""int64 ids and offsets, as the batches hold them."""
ROW_PASSES = 7
"""How often each embedding row a sample uses crosses memory: the forward pass reads it; the row-wise Adam
reads and writes the weight and its two moments (3 + 3). The sparse gradient is left out: a kernel that fuses the
backward pass with the update (FBGEMM's) never writes it, so the limit is one this PyTorch code cannot reach."""
DENSE_PASSES = 7
"""Adam over the MLP's parameters once a step: read weight, gradient and two moments, write three."""


@dataclass(frozen=True)
class Traffic:
    """The bytes one training sample must move through memory, from the workload's shape (the defaults are
    ``RecsysShape``'s, a test ties them and the parameter count to the model)."""

    features: int = 8
    ids_per_feature: float = 2.5
    """The mean bag: 1 to 4 ids, uniform."""
    dim: int = 32
    dense: int = 13
    mlp_parameters: int = 7_457

    def bytes_per_sample(self, batch_size: int) -> float:
        """Embedding rows read and updated, the sample's inputs, and its share of the MLP's update.

        >>> round(Traffic().bytes_per_sample(256)), round(Traffic().bytes_per_sample(2048))
        (19016, 18302)
        """
        ids = self.features * self.ids_per_feature
        rows = ids * self.dim * FP32_BYTES * ROW_PASSES
        inputs = (self.dense + 1) * FP32_BYTES + (ids + self.features) * ID_BYTES
        return rows + inputs + self.mlp_parameters * FP32_BYTES * DENSE_PASSES / batch_size


@dataclass(frozen=True)
class Limit:
    """The memory-bandwidth limit: the throughput at which a stage's bytes would fill the measured bandwidth, the
    median of several copies, with the interval of that median (``bandwidth_interval``, bytes/s) when measured."""

    bandwidth_bytes_per_s: float
    traffic: Traffic = Traffic()
    bandwidth_interval: tuple[float, float] | None = None
    """The measured bandwidth's interval (low, high), as gpufly bench times a median (order statistics)."""
    interval_level: float | None = None
    """The interval's confidence (0.978 for 10 copies)."""
    copies: int | None = None
    """How many timed copies the median is of."""

    def samples_per_s(self, batch_size: int) -> float:
        return self.bandwidth_bytes_per_s / self.traffic.bytes_per_sample(batch_size)

    def share(self, throughput: float | None, batch_size: int | None) -> float | None:
        """The throughput as a share of the limit at its batch size (the MLP's update is shared by the batch).

        >>> round(Limit(1e9).share(10_000, 256), 3)
        0.19
        """
        if throughput is None or not batch_size:
            return None
        return throughput / self.samples_per_s(batch_size)

    def share_interval(self, throughput: float | None, batch_size: int | None) -> tuple[float, float] | None:
        """The share at the high and at the low end of the bandwidth's interval (the bandwidth's uncertainty alone).

        >>> [round(x, 3) for x in Limit(1e9, bandwidth_interval=(0.8e9, 1.25e9)).share_interval(10_000, 256)]
        [0.152, 0.238]
        """
        if self.bandwidth_interval is None or throughput is None or not batch_size:
            return None
        low, high = self.bandwidth_interval
        per_sample = self.traffic.bytes_per_sample(batch_size)
        return throughput * per_sample / high, throughput * per_sample / low

    def to_dict(self) -> dict[str, Any]:
        """The bandwidth behind the limit column, with its interval, as ``--json`` gives it."""
        return {"bytes_per_s": self.bandwidth_bytes_per_s,
                "interval": None if self.bandwidth_interval is None else list(self.bandwidth_interval),
                "level": self.interval_level, "copies": self.copies}


def with_limit(rows: list[dict[str, Any]], limit: Limit | None) -> list[dict[str, Any]]:
    """The case study's rows with ``bytes_per_sample`` and ``limit_share`` added (None without a bandwidth)."""
    out = []
    for row in rows:
        batch = row.get("batch_size") or 256
        interval = None if limit is None else limit.share_interval(row.get("throughput"), batch)
        out.append({**row, "bytes_per_sample": None if limit is None else limit.traffic.bytes_per_sample(batch),
                    "limit_share": None if limit is None else limit.share(row.get("throughput"), batch),
                    "limit_share_interval": None if interval is None else list(interval)})
    return out


OWNED_HOURS = 3 * 365 * 24
"""A bought GPU's launch price spread over three years of hours: the ownership cost an hour, when none is given."""


def catalog_price_per_hour(device_name: str, total_memory: int) -> tuple[float, str] | None:
    """On a GPU the catalog knows, (its launch price per owned hour, where that came from); None when the
    catalog has no price for it (data-centre cards have no published price)."""
    from gpufly.catalog import default_catalog

    spec = default_catalog().match_device(device_name, total_memory)
    if spec is None or spec.launch_price_usd is None:
        return None
    price = spec.launch_price_usd / OWNED_HOURS
    return price, (f"{spec.name} launch price ${spec.launch_price_usd:,.0f} over {OWNED_HOURS:,} hours = "
                   f"${price:.3f}/h (catalog; --price-per-hour overrides)")
