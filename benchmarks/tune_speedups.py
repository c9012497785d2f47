"""The recommender case study, stage by stage: data, then compute optimizations, measured in one run.

Starts from a deliberately naive pipeline (a per-sample Python dataset collated by a Python loop, one
embedding table per feature with dense gradients and Adam over every row, batch 256, no worker) and
adds one change at a time, keeping each. Every configuration trains on the same rows of the same
generated click log (gpufly.tune.workloads.recsys); throughput is samples over the wall time of the
measured steps (fetch included, warm-up steps excluded); the held-out log loss after training shows
that no change bought speed by learning less. Run: ``python benchmarks/tune_speedups.py``.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from gpufly.tune.workloads.recsys import (
    DLRM,
    BatchedDataset,
    ClickLog,
    PerSampleDataset,
    RecsysShape,
    batch_of,
    collate_per_sample,
    eval_logloss,
    optimizers,
    train_step,
)


@dataclass(frozen=True)
class Config:
    label: str
    stage: str
    batched: bool = False
    sparse: bool = False
    fused: bool = False
    batch_size: int = 256
    workers: int = 0
    lr: float = 1e-3


STAGES = [
    Config("naive: per-sample dataset, dense Adam, batch 256", "baseline"),
    Config("+ batched (vectorized) collation", "data", batched=True),
    Config("+ sparse embedding gradients, row-wise SparseAdam", "compute", batched=True, sparse=True),
    Config("+ fused embedding bag (one table)", "compute", batched=True, sparse=True, fused=True),
    Config("+ batch 2048 (lr x4)", "compute", batched=True, sparse=True, fused=True, batch_size=2048, lr=4e-3),
    Config("+ 1 loader worker, persistent", "data", batched=True, sparse=True, fused=True, batch_size=2048,
           lr=4e-3, workers=1),
]


def loader(log: ClickLog, config: Config, rows: int) -> DataLoader:
    if config.batched:
        data = torch.utils.data.Subset(BatchedDataset(log, config.batch_size), range(rows // config.batch_size))
        return DataLoader(data, batch_size=None, num_workers=config.workers,
                          persistent_workers=config.workers > 0)
    data = torch.utils.data.Subset(PerSampleDataset(log), range(rows))
    return DataLoader(data, batch_size=config.batch_size, collate_fn=collate_per_sample,
                      num_workers=config.workers, drop_last=True)


def run(log: ClickLog, config: Config, rows: int, held_out: object, warmup: int = 3) -> dict[str, float]:
    torch.manual_seed(0)
    model = DLRM(log.shape, fused=config.fused, sparse=config.sparse)
    opts = optimizers(model, lr=config.lr, sparse=config.sparse)
    samples, started = 0, None
    for step, batch in enumerate(loader(log, config, rows)):
        if step == warmup:
            started, samples = time.perf_counter(), 0
        train_step(model, opts, batch)
        samples += len(batch)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    return {"samples_per_s": samples / elapsed if elapsed else 0.0, "logloss": eval_logloss(model, held_out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=61_440, help="Training rows per configuration.")
    parser.add_argument("--price-per-hour", type=float, default=None,
                        help="USD per hour of this machine, for samples per dollar (on a GPU in the catalog, "
                             "its launch price over three years by default).")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.price_per_hour is None:
        args.price_per_hour = catalog_price_per_hour()
    shape = RecsysShape()
    log = ClickLog(replace(shape, rows=args.rows + 8192))
    held_out = batch_of(log, torch.arange(args.rows, args.rows + 8192).numpy())
    print(f"recsys (DLRM-style: {shape.sparse} tables x {shape.table_rows:,} rows x {shape.dim}, "
          f"{shape.dense} dense features) on {platform.machine()} CPU, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}; {args.rows:,} training rows per configuration, 3 warm-up steps excluded")
    header = f"{'configuration':<54}{'stage':>9}{'samples/s':>12}{'speedup':>9}{'logloss':>9}"
    if args.price_per_hour:
        header += f"{'samples/$':>14}"
    print(header)
    baseline = None
    results = []
    for config in STAGES:
        measured = run(log, config, args.rows, held_out)
        baseline = baseline or measured
        speedup = measured["samples_per_s"] / baseline["samples_per_s"]
        results.append((config, measured, speedup))
        line = (f"{config.label:<54}{config.stage:>9}{measured['samples_per_s']:>12,.0f}{speedup:>8.2f}x"
                f"{measured['logloss']:>9.4f}")
        if args.price_per_hour:
            line += f"{measured['samples_per_s'] * 3600 / args.price_per_hour:>14,.0f}"
        print(line, flush=True)
    tolerance = 0.01
    safe = [r for r in results if r[1]["logloss"] <= baseline["logloss"] + tolerance]
    best = max(safe, key=lambda r: r[1]["samples_per_s"])
    print(f"best safe configuration (held-out log loss within {tolerance} of the baseline's "
          f"{baseline['logloss']:.4f}): {best[0].label}: {best[2]:.2f}x the naive baseline")
    communication(args.threads)
    for name in ("cnn", "transformer"):
        searched(name)


OWNED_HOURS = 3 * 365 * 24
"""A bought GPU's launch price spread over three years of hours: the ownership cost an hour, when none is given."""


def catalog_price_per_hour() -> float | None:
    """On a GPU the catalog knows, its launch price per owned hour; None on a CPU or an unknown card."""
    if not torch.cuda.is_available():
        return None
    from gpufly.catalog import default_catalog

    properties = torch.cuda.get_device_properties(0)
    spec = default_catalog().match_device(properties.name, properties.total_memory)
    if spec is None or spec.launch_price_usd is None:
        return None
    price = spec.launch_price_usd / OWNED_HOURS
    print(f"price: {spec.name} launch price ${spec.launch_price_usd:,.0f} over {OWNED_HOURS:,} hours = "
          f"${price:.3f}/h (catalog; --price-per-hour overrides)")
    return price


def searched(name: str, steps: int = 24) -> None:
    """A built-in workload through the tuner's own search (subprocess trials, probe-loss safety)."""
    import tempfile

    from gpufly.tune.engine import ResultsLog, Search, default_knobs, run_in_subprocess
    from gpufly.tune.worker import build

    knobs = default_knobs(build(name, {}), torch.cuda.is_available(), 0)
    with tempfile.TemporaryDirectory() as folder:
        search = Search(name, knobs, ResultsLog(Path(folder) / "trials.jsonl"),
                        lambda w, t, s: run_in_subprocess(w, t, s, steps=steps), timeout_s=600)
        best = search.run()
    print(f"\n{name} (gpufly tune's search, {steps} baseline steps per trial, the same samples)")
    print(f"{'configuration':<40}{'throughput':>18}{'speedup':>9}{'drift':>8}  verdict")
    for r in search.results:
        rate = "—" if r.throughput is None else f"{r.throughput:,.0f} {r.unit}/s"
        drift = "—" if r.loss_drift is None else f"{100 * r.loss_drift:.1f}%"
        speedup = "—" if r.speedup is None else f"{r.speedup:.2f}x"
        print(f"{r.name:<40}{rate:>18}{speedup:>9}{drift:>8}  {r.status}" + (f": {r.error[:50]}" if r.error else ""))
    if best is not None and best.speedup is not None:
        print(f"baseline {search.results[0].throughput:,.0f}, best safe {best.throughput:,.0f} {best.unit}/s "
              f"({best.name}): {best.speedup:.2f}x")


def communication(threads: int | None) -> None:
    """The communication stage: the best compute configuration as tuner trials, 1 process against DDP over 2."""
    from gpufly.tune.engine import Trial, run_in_subprocess

    base = {"batched": True, "sparse": True, "fused": True}
    print("\ncommunication (tuner trials: 40 steps of 256 samples each, the same samples; DDP through torchrun, "
          "gloo, OMP_NUM_THREADS=1 per process)")
    print(f"{'configuration':<54}{'samples/s':>12}{'vs 1 process':>14}{'probe loss':>12}")
    single = None
    for label, knobs in (("1 process", base), ("DDP, 2 processes", {**base, "ddp": 2}),
                         ("DDP, 2 processes, fp16 gradient compression", {**base, "ddp": 2, "ddp_hook": "fp16"})):
        result = run_in_subprocess("recsys", Trial(label, knobs), timeout_s=600, steps=40)
        if not result.usable:
            print(f"{label:<54}{result.status + ': ' + (result.error or '')[:60]}")
            continue
        single = single or result
        ratio = (result.throughput or 0) / (single.throughput or 1)
        print(f"{label:<54}{result.throughput:>12,.0f}{ratio:>13.2f}x{result.eval_loss:>12.4f}", flush=True)


if __name__ == "__main__":
    main()
