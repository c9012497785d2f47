"""The recommender case study, stage by stage (data, compute, communication), then the other built-ins' search.

The stages are gpufly.tune.stages, the same plan that `gpufly tune recsys` runs through the tuner's one
Search: each a real tuner trial of
the built-in recsys workload in its own process (the same worker, the same training samples, samples over the
wall time of the measured steps with warm-up steps excluded and the device synchronized), cumulative, each
judged by its probe loss and its held-out log loss against the naive pipeline, the baseline re-run through the
run (the noise floor) and the fastest stages confirmed by A/B rounds (the speedup's 95% interval). The
reference row is the loop a competent engineer writes by hand (gpufly.tune.workloads.recsys_reference), run by
the same worker and then in rounds beside the fastest safe stage (and the fastest at batch 256); the same loop
outside the worker is timed in this process, interleaved with the worker's runs of it, so the harness's own
per-step cost is known. Each row's share of the memory-bandwidth limit is its samples/s times the bytes a sample
moves over this machine's measured copy bandwidth (gpufly.tune.stages.Limit; ``--bandwidth-gbps`` from gpufly
bench, else the best of a copy measured before and after the run). Then cnn
and transformer through the tuner's search. On a GPU the trials run there (``--device``); samples per dollar use
``--price-per-hour`` or the catalog's launch price over three years. Run: ``python benchmarks/tune_speedups.py``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from pathlib import Path

import torch

from gpufly.tune import GreedyPlan, ResultsLog, Search, SubprocessRunner, Target, TrialResult, offered
from gpufly.tune.noise import ratio_interval
from gpufly.tune.stages import Limit, catalog_price_per_hour, stages
from gpufly.tune.trial import Trial
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
    parser.add_argument("--bandwidth-gbps", type=float, default=None,
                        help="The machine's memory bandwidth for the limit, as gpufly bench measured it on a quiet "
                             "machine (memory.copy); by default the best of a copy measured before and after.")
    parser.add_argument("--harness-rounds", type=int, default=3,
                        help="Rounds of the hand-written loop in this process against the worker's run of it.")
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
    before = copy_bandwidth(device)
    print(f"memory copy bandwidth before the run: {before / 1e9:.2f} GB/s")
    plan = stages(args.processes, cuda)
    runner = SubprocessRunner("recsys", args.steps, device, timeout_s=900)
    with tempfile.TemporaryDirectory() as folder:
        run = Search(plan, ResultsLog(Path(folder) / "stages.jsonl"), runner,
                     on_result=lambda r: print(f"  done: {r.name}", flush=True))
        run.run()
    after = copy_bandwidth(device)
    limit = Limit(args.bandwidth_gbps * 1e9 if args.bandwidth_gbps else max(before, after))
    print(f"memory copy bandwidth after the run: {after / 1e9:.2f} GB/s; the limit uses "
          f"{limit.bandwidth_bytes_per_s / 1e9:.2f} GB/s and {limit.traffic.bytes_per_sample(256):,.0f} bytes a "
          "sample at batch 256")
    table(run.results, limit, price)
    conclude(run, "stage")
    for comparison in plan.comparisons:
        print(comparison.text())
    harness(runner, args.harness_rounds)
    if not args.skip_search:
        for name in ("cnn", "transformer"):
            searched(name, args.search_steps, device)


def copy_bandwidth(device: str = "cpu") -> float:
    """The memory bandwidth the trials run against, in B/s (gpufly.bench.copy_bandwidth, as `gpufly tune recsys`
    measures it)."""
    import torch

    from gpufly.bench import copy_bandwidth as measured

    return measured(torch, device)


def table(results: list[TrialResult], limit: Limit, price: float | None) -> None:
    """One row per stage and the reference: samples/s with the runs behind it, the speedup, the held-out loss, the
    share of the memory-bandwidth limit, samples per dollar, on a GPU joules per sample, and the verdict."""
    joules = any(getattr(r, "joules_per_unit", None) is not None for r in results)
    print(f"{'stage':<14}{'configuration':<50}{'samples/s':>11}{'runs [min-max]':>24}{'speedup [95%]':>24}"
          f"{'held-out':>10}{'limit':>8}" + (f"{'samples/$':>14}" if price else "") + (f"{'J/sample':>10}" if joules
                                                                                       else "") + "  verdict")
    for r in results:
        rate = "—" if r.throughput is None else f"{r.throughput:,.0f}"
        runs = (f"{len(r.throughputs)} [{min(r.throughputs):,.0f}-{max(r.throughputs):,.0f}]" if r.throughputs
                else "—")
        speedup = "—" if r.speedup is None else f"{r.speedup:.2f}x"
        if r.role == "trial" and r.speedup_low is not None and r.speedup_high is not None:
            speedup += f" [{r.speedup_low:.2f}-{r.speedup_high:.2f}]"
        loss = "—" if r.eval_metric is None else f"{r.eval_metric:.4f}"
        share = limit.share(r.throughput, r.batch_size or 256)
        verdict = r.status + (f" ({r.role})" if r.role != "trial" else "") + (f": {r.error[:60]}" if r.error else "")
        line = (f"{r.stage or '':<14}{r.name[:49]:<50}{rate:>11}{runs:>24}{speedup:>24}{loss:>10}"
                f"{'—' if share is None else f'{share:.1%}':>8}")
        if price:
            dollars = r.samples_per_dollar(price)
            line += f"{'—' if dollars is None else f'{dollars:,.0f}':>14}"
        if joules:
            energy = getattr(r, "joules_per_unit", None)
            line += f"{'—' if energy is None else f'{energy:.3g}':>10}"
        print(f"{line}  {verdict}", flush=True)


def harness(runner: SubprocessRunner, rounds: int) -> None:
    """The hand-written loop as a user runs it (this process) against the worker's run of the same loop, in
    rounds: what the worker's loop (DataLoader, the per-step loss read back, the timer) costs per step."""
    if rounds < 1:
        return
    from gpufly.tune.workloads.recsys_reference import train

    ratios, bare = [], []
    for number in range(rounds):  # B/A every other round, so neither always runs second
        if number % 2:
            bare.append(train(runner.steps))
        worker_run = runner(Trial("reference", {"reference": True}))
        if not number % 2:
            bare.append(train(runner.steps))
        if worker_run.throughput:
            ratios.append(bare[-1] / worker_run.throughput)
    interval = ratio_interval(ratios, None)
    if interval is None:
        print("harness: the worker's runs of the reference failed")
        return
    print(f"the hand-written loop in this process: {statistics.median(bare):,.0f} samples/s, {interval.estimate:.2f}x "
          f"the worker's run of it (95% interval {interval.low:.2f}-{interval.high:.2f}x over {len(ratios)} rounds)")


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
