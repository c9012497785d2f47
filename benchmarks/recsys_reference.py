"""The recommender's stages against the hand-written loop, interleaved in rounds: for a machine too noisy to rank
single runs.

Each round runs the reference row (gpufly.tune.workloads.recsys_reference) and every stage's configuration as the
case study carries it (gpufly.tune.stages, all safe), each a tuner trial in its own process through the same worker,
in an order rotated every round so none always runs first. A row's figure is the median of its rounds; its ratio
to the reference is the geometric mean of the per-round ratios with their 95% t interval, and beside it the median
of those ratios with their range, which one run caught in another job's burst cannot drag the way it drags a mean.
Each row's share of the memory-bandwidth limit uses ``--bandwidth-gbps`` (gpufly bench's memory.copy on a quiet
machine). Run: ``python benchmarks/recsys_reference.py``.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from gpufly.tune.noise import ratio_interval
from gpufly.tune.stages import REFERENCE, Limit, stages
from gpufly.tune.trial import SubprocessRunner, Trial


def lineup(skip_naive: bool) -> list[Trial]:
    """The reference, then each stage's cumulative knobs (every stage kept: the case study's verdicts decide which
    are safe; here each is timed only), without the communication stage."""
    trials = [Trial(REFERENCE.label, dict(REFERENCE.adds))]
    carried: dict[str, Any] = {}
    for stage in stages().stages:
        carried = {**carried, **stage.adds}
        if stage.stage == "communication" or (skip_naive and stage.stage in ("baseline", "data") and
                                              "sparse" not in carried):
            continue
        trials.append(Trial(stage.label, dict(carried)))
    return trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bandwidth-gbps", type=float, default=25.3)
    parser.add_argument("--price-per-hour", type=float, default=None)
    parser.add_argument("--skip-naive", action="store_true", help="Leave out the slow stages before sparse gradients.")
    args = parser.parse_args()
    runner = SubprocessRunner("recsys", args.steps, "cpu", timeout_s=900)
    trials = lineup(args.skip_naive)
    rates: dict[str, list[float]] = {t.name: [] for t in trials}
    ratios: dict[str, list[float]] = {t.name: [] for t in trials}
    batches: dict[str, Any] = {}
    for number in range(args.rounds):
        shift = number % len(trials)
        measured = {t.name: runner(t) for t in trials[shift:] + trials[:shift]}
        reference = measured[trials[0].name].throughput
        for name, result in measured.items():
            if result.throughput:
                rates[name].append(result.throughput)
                batches[name] = result.batch_size
                if reference:
                    ratios[name].append(result.throughput / reference)
            else:
                print(f"round {number + 1}: {name}: {result.status}: {result.error}")
        print(f"round {number + 1} of {args.rounds} done", flush=True)
    limit = Limit(args.bandwidth_gbps * 1e9)
    print(f"{'configuration':<52}{'samples/s':>11}{'runs [min-max]':>24}{'x reference [95%]':>24}"
          f"{'median x [min-max]':>22}{'limit':>8}"
          + (f"{'samples/$':>15}" if args.price_per_hour else ""))
    for trial in trials:
        runs = rates[trial.name]
        if not runs:
            continue
        median = statistics.median(runs)
        interval = ratio_interval(ratios[trial.name], None)
        versus = "—" if interval is None else f"{interval.estimate:.2f} [{interval.low:.2f}-{interval.high:.2f}]"
        each = ratios[trial.name]
        middle = "—" if not each else f"{statistics.median(each):.2f} [{min(each):.2f}-{max(each):.2f}]"
        share = limit.share(median, batches.get(trial.name) or 256)
        line = (f"{trial.name[:51]:<52}{median:>11,.0f}{f'{len(runs)} [{min(runs):,.0f}-{max(runs):,.0f}]':>24}"
                f"{versus:>24}{middle:>22}{'—' if share is None else f'{share:.1%}':>8}")
        if args.price_per_hour:
            line += f"{median * 3600 / args.price_per_hour:>15,.0f}"
        print(line)


if __name__ == "__main__":
    main()
