"""What the profiler costs: the same training loop with and without ``gpufly.Profiler``, interleaved.

A CPU (or --device cuda) MLP training loop over a DataLoader; each round times ``--steps`` steps
without the profiler and then with it (profiler wrapping the loader, ``with prof.step()``, model and
optimizer hooks: everything a user turns on); rounds alternate which goes first, so drift in the
machine's speed falls on both. Reports the median step time of each and the overhead in percent.
Run: ``python benchmarks/profile_overhead.py [--device cuda] [--rounds 7]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import gpufly

Setup = tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader]


def _setup(device: str, width: int, batch: int, steps: int) -> Setup:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(batch * steps, 512), torch.randint(0, 10, (batch * steps,)))
    return model, optimizer, DataLoader(data, batch_size=batch, pin_memory=device.startswith("cuda"))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
          device: str) -> None:
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def plain(device: str, width: int, batch: int, steps: int) -> float:
    model, optimizer, loader = _setup(device, width, batch, steps)
    times = []
    _sync(device)
    last = time.perf_counter()
    for x, y in loader:
        _step(model, optimizer, x, y, device)
        _sync(device)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return statistics.median(times[3:])


def profiled(device: str, width: int, batch: int, steps: int) -> float:
    model, optimizer, loader = _setup(device, width, batch, steps)
    prof = gpufly.Profiler(warmup=3, device=device).watch(model, optimizer)
    _sync(device)
    for x, y in prof.loader(loader):
        with prof.step():
            _step(model, optimizer, x, y, device)
            _sync(device)
    data = prof.finish()
    return statistics.median(s.wall_s for s in data.measured)


def bookkeeping_us(steps: int = 3000) -> float:
    """The profiler's own cost per step, measured on an empty loop (no work to hide it in): µs per step.

    Includes the loader wrapper, ``with prof.step()``, the memory reading, the model hooks around a
    tiny forward and one counted ``.item()``.
    """
    model = torch.nn.Linear(1, 1)
    batches = [torch.zeros(1, 1) for _ in range(steps)]
    loss = torch.zeros(())

    def bare() -> float:
        started = time.perf_counter()
        for x in batches:
            model(x)
            loss.item()
        return time.perf_counter() - started

    def with_profiler() -> float:
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None).watch(model)
        started = time.perf_counter()
        for x in prof.loader(batches):
            with prof.step():
                model(x)
                loss.item()
        elapsed = time.perf_counter() - started
        prof.finish()
        return elapsed

    bare(), with_profiler()
    plain_s = statistics.median(bare() for _ in range(5))
    profiled_s = statistics.median(with_profiler() for _ in range(5))
    return (profiled_s - plain_s) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"without": [], "with": []}
    plain(args.device, args.width, args.batch, 10)  # warm the allocator and the kernels
    for round_ in range(args.rounds):
        order = [("without", plain), ("with", profiled)]
        for name, run in order if round_ % 2 == 0 else order[::-1]:
            runs[name].append(run(args.device, args.width, args.batch, args.steps))
    without, with_ = statistics.median(runs["without"]), statistics.median(runs["with"])
    overhead = (with_ - without) / without
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "CPU"
    print(f"profiler overhead on {args.device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} "
          f"threads; MLP 512-{args.width}-{args.width}-10, batch {args.batch}, {args.rounds} rounds x "
          f"{args.steps} steps, medians")
    print(f"{'loop':<22}{'median step ms':>16}")
    print(f"{'without profiler':<22}{1000 * without:>16.3f}")
    print(f"{'with profiler':<22}{1000 * with_:>16.3f}")
    cost = bookkeeping_us()
    print(f"measured difference: {100 * overhead:+.2f}% of step time (run-to-run noise on a shared VM is about 2%)")
    print(f"profiler bookkeeping: {cost:.1f} µs per step (empty loop) = {cost / (1e6 * without) * 100:.2f}% of this "
          f"{1000 * without:.1f} ms step (target: under 2%)")


if __name__ == "__main__":
    main()
