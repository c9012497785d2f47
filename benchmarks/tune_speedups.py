"""The recommender case study, stage by stage (data, compute, communication), then the other built-ins' search.

The stages are gpufly.tune.stages, the same plan that `gpufly tune recsys` runs through the tuner's one
Search: each a real tuner trial of
the built-in recsys workload in its own process (the same worker, the same training samples, samples over the
wall time of the measured steps with warm-up steps excluded and the device synchronized), cumulative, each
judged by its probe loss and its held-out log loss against the naive pipeline, the baseline re-run through the
run (the noise floor) and the fastest stages confirmed by A/B rounds (the speedup's 95% interval). Then cnn
and transformer through the tuner's search. On a GPU the trials run there (``--device``); samples per dollar use
``--price-per-hour`` or the catalog's launch price over three years. Run: ``python benchmarks/tune_speedups.py``.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path

import torch

from gpufly.tune import GreedyPlan, ResultsLog, Search, SubprocessRunner, Target, TrialResult, offered
from gpufly.tune.stages import catalog_price_per_hour, stages
from gpufly.tune.workload import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=160, help="Baseline-sized (256-sample) steps per recsys stage.")
    parser.add_argument("--search-steps", type=int, default=24, help="Baseline steps per cnn/transformer trial.")
    parser.add_argument("--price-per-hour", type=float, default=None,
                        help="USD per hour of this machine, for samples per dollar (on a GPU in the catalog, "
                             "its launch price over three years by default).")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--processes", type=int, default=2, help="DDP processes in the communication stage.")
    parser.add_argument("--skip-search", action="store_true", help="Only the recsys stages.")
    args = parser.parse_args()
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = "cuda" if cuda else "cpu"
    price = args.price_per_hour
    if price is None and cuda:
        properties = torch.cuda.get_device_properties(0)
        found = catalog_price_per_hour(properties.name, properties.total_memory)
        if found is not None:
            price, note = found
            print(f"price: {note}")
    where = torch.cuda.get_device_name(0) if cuda else f"{platform.machine()} CPU, {torch.get_num_threads()} threads"
    print(f"recsys case study on {where}, torch {torch.__version__}: {args.steps} steps of 256 samples per stage "
          "(a larger batch takes fewer steps), samples over the wall time of the measured steps")
    header = f"{'stage':<14}{'configuration':<50}{'samples/s':>11}{'speedup':>9}{'held-out':>10}  verdict"
    print(header + (f"{'samples/$':>16}" if price else ""))

    def show(r: TrialResult) -> None:
        rate = "—" if r.throughput is None else f"{r.throughput:,.0f}"
        speedup = "—" if r.speedup is None else f"{r.speedup:.2f}x"
        loss = "—" if r.eval_metric is None else f"{r.eval_metric:.4f}"
        verdict = r.status + (f": {r.error[:60]}" if r.error else "")
        line = f"{r.stage or '':<14}{r.name:<50}{rate:>11}{speedup:>9}{loss:>10}  {verdict:<8}"
        dollars = r.samples_per_dollar(price)
        if price and dollars:
            line += f"{dollars:>16,.0f}"
        print(line, flush=True)

    with tempfile.TemporaryDirectory() as folder:
        run = Search(stages(args.processes), ResultsLog(Path(folder) / "stages.jsonl"),
                     SubprocessRunner("recsys", args.steps, device, timeout_s=900), on_result=show)
        run.run()
    conclude(run, "stage")
    if not args.skip_search:
        for name in ("cnn", "transformer"):
            searched(name, args.search_steps, device)


def searched(name: str, steps: int = 24, device: str = "cpu") -> None:
    """A built-in workload through the tuner's own search (subprocess trials, probe-loss safety)."""
    knobs = offered(Target(build(name, {}), device == "cuda"))
    with tempfile.TemporaryDirectory() as folder:
        search = Search(GreedyPlan(knobs, steps=steps), ResultsLog(Path(folder) / "trials.jsonl"),
                        SubprocessRunner(name, steps, device, timeout_s=600))
        search.run()
    print(f"\n{name} (gpufly tune's search, {steps} baseline steps per trial, the same samples)")
    print(f"{'configuration':<40}{'throughput':>18}{'speedup':>9}{'drift':>8}  verdict")
    for r in search.results:
        rate = "—" if r.throughput is None else f"{r.throughput:,.0f} {r.unit}/s"
        drift = "—" if r.loss_drift is None else f"{100 * r.loss_drift:.1f}%"
        speedup = "—" if r.speedup is None else f"{r.speedup:.2f}x"
        print(f"{r.name:<40}{rate:>18}{speedup:>9}{drift:>8}  {r.status}" + (f": {r.error[:50]}" if r.error else ""))
    conclude(search, "configuration")


def conclude(search: Search, what: str) -> None:
    """The noise floor, the confirmed speedups with their intervals, and the run's verdict."""
    baseline, decision = search.baseline, search.decision()
    if baseline is not None and baseline.noise_floor is not None:
        print(f"noise floor: {baseline.noise_floor:.1%} over {len(baseline.throughputs)} baseline runs "
              f"({baseline.throughput:,.0f} {baseline.unit}/s median)")
    for r in search.results:
        if r.rounds > 1 and r.speedup_low is not None and r.speedup_high is not None:
            print(f"confirmed: {r.name}: {r.speedup:.2f}x [{r.speedup_low:.2f}-{r.speedup_high:.2f}] over "
                  f"{r.rounds} A/B rounds")
    winner = decision.winner
    if decision.verdict == "faster" and winner is not None:
        print(f"best safe {what}: {winner.name}: {decision.reason}")
    else:
        print(f"no winner ({decision.verdict}): {decision.reason}")


if __name__ == "__main__":
    main()
