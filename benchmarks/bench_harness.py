"""Does the bench harness measure? Its GEMM figure beside torch.matmul timed independently.

    python benchmarks/bench_harness.py [--sizes 256,512,1024,2048] [--rounds 3] [--dtype fp32]
    python benchmarks/bench_harness.py --device cuda --dtype bf16 --sizes 4096,8192   # events vs wall clock

For each size, rounds alternate the two timings (so load from a neighbour falls on both):
  harness:  gpufly.bench's kernel (torch.mm into a preallocated output) timed by measure():
            warm-up, then the median of repeated samples;
  torch:    torch.matmul on fresh random inputs, each call timed alone with perf_counter; median.
The table prints the median of each over the rounds, their ratio, and the median width of the harness's ~95%
interval (as a share of its median; gpufly bench re-measures a figure above 10%); the harness should land within
30% of torch's own timing. This is a benchmark and not a test on purpose: a ratio of two timings on a shared machine
depends on what else runs there, and the harness's arithmetic is tested with a fake clock (tests/bench).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from gpufly.bench import kernels, measure
from gpufly.bench.work import gemm_flops
from gpufly.hw.host import cpu_model


def independent(torch: Any, n: int, dtype: Any, calls: int, device: Any) -> float:
    """torch.matmul's median rate in FLOP/s, each call timed alone by the host clock, the device synchronized
    before and after it on a GPU."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    torch.matmul(a, b)
    rates = []
    for _ in range(calls):
        sync()
        start = time.perf_counter()
        torch.matmul(a, b)
        sync()
        rates.append(gemm_flops(n, n, n) / (time.perf_counter() - start))
    return statistics.median(rates)


def harness_timing(torch: Any, kernel: Any, device: Any, repeats: int) -> Any:
    """The bench's own timing of the kernel: CUDA events on a GPU, the host clock on a CPU."""
    if device.type == "cuda":
        from gpufly.bench.cuda import measure_events

        return measure_events(torch, kernel.fn, warmup=5, repeats=repeats)
    return measure(kernel.fn, warmup=2, repeats=repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,512,1024,2048")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (CUDA events against a synchronized clock)")
    args = parser.parse_args()

    import torch

    device = torch.device(args.device)
    dtype = getattr(torch, kernels.FLOAT_DTYPES[args.dtype])
    where = (f"{torch.cuda.get_device_name(device)}" if device.type == "cuda"
             else f"{cpu_model()}, {torch.get_num_threads()} threads")
    print(f"{device.type.upper()} GEMM {args.dtype}: {where}, "
          f"torch {torch.__version__}; {args.rounds} rounds of {args.repeats} timed calls each")
    print(f"{'n':>6} {'harness GFLOP/s':>16} {'torch.matmul GFLOP/s':>21} {'ratio':>7} {'interval':>9}")
    for n in (int(size) for size in args.sizes.split(",")):
        kernel = kernels.gemm(torch, device, args.dtype, n, n, n)
        ours, theirs, widths = [], [], []
        for _ in range(args.rounds):
            timing = harness_timing(torch, kernel, device, args.repeats)
            ours.append(kernel.work / timing.median_s)
            widths.append(timing.relative_width)
            theirs.append(independent(torch, n, dtype, args.repeats, device))
        harness, reference = statistics.median(ours), statistics.median(theirs)
        print(f"{n:>6} {harness / 1e9:>16.1f} {reference / 1e9:>21.1f} {harness / reference:>7.2f} "
              f"{statistics.median(widths):>8.1%}")


if __name__ == "__main__":
    main()
