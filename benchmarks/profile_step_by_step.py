"""What the profiler costs a training loop, measured step by step against plain steps of the same loop.

``profile_overhead.py`` compares blocks of 1000 steps run one way and then another, and on a shared VM a block's
speed moves by several per cent from one second to the next: its A/A check reads ±2-5%, wider than the 2% target.
Here every cycle runs one step of each variant, in an order shuffled cycle by cycle, so the machine's drift falls on
all of them alike and the comparison resolves a few tenths of a per cent. Three phases, on the ~1 ms loop (or the
~30 ms one) of ``profile_overhead.py`` (each variant with its own iterator over its DataLoader):

1. **plain path**: one loop shared by all variants, and a profiler that looks inside no step:

   - ``plain``: the step as written;
   - ``plain again``: the same, as a variant of its own (an A/A check: what it reads is the method's own error);
   - ``wrapping alone``: the batch through a bare generator and the step inside an empty context manager, the
     structure of the profiler's two lines with nothing in them: the floor any such wrapping costs;
   - ``gpufly``: the batch through ``prof.loader``, the step inside ``with prof.step()`` (its own time still
     sampled as by default).

2. **detailed**: a profiler that looks inside every step. Its hooks stay on its model, so it gets a model,
   optimizer and loader of its own (a copy, built from the same seed); the plain steps it is set against run on
   another copy, with a third copy's plain steps beside them (``plain, a copy``) as the check on what copies alone
   change: where each landed in memory. That offset is not in the interval, and it is not small: two plain copies
   of the 1 ms loop read -0.65% to +0.03% apart, and on the 30 ms loop the profiled copy ran 1.4% faster than the
   plain one (0.2% between the two plain copies), more than any cost of the profiler there. So in one process
   phases 2 and 3 say how large a cost is to within that offset; phase 1, on one shared loop, has none. With
   ``--processes N`` they run in N fresh processes instead, the profiled copy rotated among the three, and the
   figure is the mean over processes, its interval drawn over processes: the offsets then count as the noise they
   are. The sync counter and the memory
   readings stay out of this phase (the schedule would take a reading on every step; the default takes one a window).

3. **default**: the profiler as a user runs it (the default schedule: the first 8 steps detailed with the sync
   counter in, then windows of 16 at random places, the sync counter in one window of four, memory read once a
   window), on copies as in phase 2. Everything it costs is in this figure, the windows' opening and closing
   included, with one thing to know: while the sync counter is in, it wraps ``torch.Tensor`` for every model in
   the process, so the plain steps of those cycles (about 1% of them) pay its wrappers too.

Each step is timed from outside, from the end of the step before (whatever variant ran it) to its own end, the
fetch included. The figure is the variant's median step against the plain one's, with a 95% bootstrap interval
over cycles (the cycle's steps drawn together). ``gpufly says`` is its own time per step, timed inside it.

Run: ``python benchmarks/profile_step_by_step.py [--cycles 10000] [--phases default] [--loop 1]`` (about 1 minute
per phase per 10,000 cycles on the 2-vCPU VM; ``--loop 1``, the ~30 ms loop, about 1.5 minutes per 1,000).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from profile_overhead import LOOPS, Loop, LoopSize

import gpufly
from gpufly.profile.records import ProfileData
from gpufly.profile.sampling import EVERY_STEP, Sampling

NO_WINDOW = Sampling(first=0, share=1e-9, later_share=1e-9)
"""A schedule whose first window opens after about 10^10 steps: every step plain."""


class Feed:
    """Endless batches from one iterator over ``loader`` at a time, made by ``start`` (a new one each epoch)."""

    def __init__(self, start: Callable[[], Iterator[Any]]) -> None:
        self.start = start
        self.iterator = start()

    def next(self) -> Any:
        try:
            return next(self.iterator)
        except StopIteration:
            self.iterator = self.start()
            return next(self.iterator)


class Empty:
    """A context manager that does nothing: the ``with`` statement's own cost."""

    def __call__(self) -> Empty:
        return self

    def __enter__(self) -> Empty:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def bare(iterable: Any) -> Iterator[Any]:
    yield from iterable


def variants(loop: Loop, prof: gpufly.Profiler) -> dict[str, Callable[[], None]]:
    step = loop.step
    plain_feed, again_feed = Feed(lambda: iter(loop.loader)), Feed(lambda: iter(loop.loader))
    bare_feed = Feed(lambda: bare(loop.loader))
    gpufly_feed = Feed(lambda: prof.loader(loop.loader))
    empty = Empty()

    def plain() -> None:
        x, y = plain_feed.next()
        step(x, y)

    def plain_again() -> None:
        x, y = again_feed.next()
        step(x, y)

    def wrapping_alone() -> None:
        x, y = bare_feed.next()
        with empty():
            step(x, y)

    def with_gpufly() -> None:
        x, y = gpufly_feed.next()
        with prof.step():
            step(x, y)

    return {"plain": plain, "plain again": plain_again, "wrapping alone": wrapping_alone, "gpufly": with_gpufly}


def copies_variants(size: LoopSize, prof: gpufly.Profiler, label: str, everything_in: bool,
                    rotation: int = 0) -> dict[str, Callable[[], None]]:
    """Plain steps on one copy of the loop, plain steps on another, and the profiler's (``label``) on a third; with
    ``everything_in`` false, the sync counter and the memory readings kept out."""
    loops = [Loop.build(size, "cpu") for _ in range(3)]
    turn = rotation % 3  # which of the three, built one after another, is profiled: rotated across processes
    watched, base, copy = loops[turn], loops[(turn + 1) % 3], loops[(turn + 2) % 3]
    if not everything_in:
        prof.syncs.arm = lambda: False  # type: ignore[method-assign]  # the sync counter out: see the docstring
        prof.steps.read_memory = lambda: None  # every step would read it here; the default schedule, one a window
    prof.watch(watched.model, watched.optimizer)  # starts the profiler: its first step is detailed
    base_feed, copy_feed = Feed(lambda: iter(base.loader)), Feed(lambda: iter(copy.loader))
    watched_feed = Feed(lambda: prof.loader(watched.loader))

    def plain() -> None:
        x, y = base_feed.next()
        base.step(x, y)

    def plain_copy() -> None:
        x, y = copy_feed.next()
        copy.step(x, y)

    def profiled() -> None:
        x, y = watched_feed.next()
        with prof.step():
            watched.step(x, y)

    return {"plain": plain, "plain, a copy": plain_copy, label: profiled}


PHASES = {
    "plain path": "plain steps (one loop, shared)",
    "detailed": "detailed steps (copies of the loop; sync counter and memory readings out)",
    "default": "the default schedule, everything in (copies of the loop)",
}


def measure(cycles: int, seed: int, phase: str = "plain path",
            size: LoopSize = LOOPS[0]) -> tuple[dict[str, list[float]], ProfileData]:
    """Each variant's step times over ``cycles`` shuffled cycles, and the profiler's data, for one of ``PHASES``, on
    the loop of ``size``."""
    torch.set_num_threads(1)
    if phase == "detailed":
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None, sampling=EVERY_STEP)
        runs = copies_variants(size, prof, "gpufly, detailed", everything_in=False, rotation=seed)
    elif phase == "default":
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None)
        runs = copies_variants(size, prof, "gpufly, default", everything_in=True, rotation=seed)
    else:
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None, sampling=NO_WINDOW)
        runs = variants(Loop.build(size, "cpu"), prof)
    names = list(runs)
    warm = [name for name in names if not name.startswith("gpufly")] if phase == "default" else names
    for _ in range(50):  # warm the variants (and torch's allocator) before anything is kept; under the default
        for name in warm:  # schedule, not the profiled one: its first steps (detailed, the sync counter in) count
            runs[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    order = names[:]
    rng = random.Random(seed)
    clock = time.perf_counter
    last = clock()
    for _ in range(cycles):
        rng.shuffle(order)
        for name in order:
            runs[name]()
            now = clock()
            times[name].append(now - last)
            last = now
    return times, prof.finish()


def difference(times: dict[str, list[float]], name: str, draws: int = 400,
               seed: int = 0) -> tuple[float, float, float]:
    """The variant's median step minus the plain one's, and a 95% interval from resampling whole cycles."""
    rng = random.Random(seed)
    ours, base = times[name], times["plain"]
    cycles = len(base)
    estimates = []
    for _ in range(draws):
        picked = rng.choices(range(cycles), k=cycles)
        estimates.append(statistics.median([ours[i] for i in picked]) - statistics.median([base[i] for i in picked]))
    estimates.sort()
    return (statistics.median(ours) - statistics.median(base), estimates[int(0.025 * draws)],
            estimates[int(0.975 * draws) - 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10_000, help="cycles of one step per variant (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order within each cycle")
    parser.add_argument("--loop", type=int, choices=(0, 1), default=0,
                        help="0: the ~1 ms loop (default), 1: the ~30 ms one (about 30 times as long per cycle)")
    parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES),
                        help="which phases to run (default: all three)")
    parser.add_argument("--processes", type=int, default=1,
                        help="run the phases on copies of the loop in this many fresh processes, one after another, "
                             "the profiled copy rotated among them, and pool them: the copies' places in memory "
                             "then average out (default 1: in this process)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cycles < 100:
        parser.error("--cycles must be at least 100")
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    size = LOOPS[args.loop]
    if args.worker:
        times, _data = measure(args.cycles, args.seed, args.phases[0], size)
        print(json.dumps({name: [statistics.median(steps), statistics.mean(steps)] for name, steps in times.items()}))
        return
    print(f"the profiler's cost step by step, on cpu ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs), torch {torch.__version__}, Python {sys.version.split()[0]}, 1 torch thread; "
          f"loop: MLP 512-{size.width}-{size.width}-10, Adam, batch {size.batch}")
    for name in args.phases:
        if name != "plain path" and args.processes > 1:
            pooled_phase(name, args, size)
        else:
            run_phase(name, args.cycles, args.seed, size)


def pooled_phase(name: str, args: argparse.Namespace, size: LoopSize) -> None:
    """Run a phase on copies in ``args.processes`` fresh processes (the profiled copy rotated) and print each
    process's figures and their mean, with a 95% bootstrap interval over processes."""
    started = time.monotonic()
    figures: list[dict[str, list[float]]] = []
    for process in range(args.processes):
        command = [sys.executable, __file__, "--worker", "--phases", name, "--cycles", str(args.cycles),
                   "--seed", str(args.seed + process), "--loop", str(args.loop)]
        output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        figures.append(json.loads(output.splitlines()[-1]))
    plain_step = statistics.median(figure["plain"][0] for figure in figures)
    print(f"\n{PHASES[name]}: {args.cycles} cycles in each of {args.processes} processes, the profiled copy rotated, "
          f"{time.monotonic() - started:.0f} s; the plain median step {plain_step * 1e6:.1f} µs (median over "
          f"processes)")
    for variant in list(figures[0])[1:]:
        medians = [figure[variant][0] / figure["plain"][0] - 1 for figure in figures]
        means = [figure[variant][1] / figure["plain"][1] - 1 for figure in figures]
        mean, low, high = mean_interval(medians)
        print(f"{variant:18s} median step {mean:+.2%} [{low:+.2%}, {high:+.2%}] against plain (mean over processes; "
              f"each: {', '.join(f'{value:+.2%}' for value in medians)}); mean step {statistics.mean(means):+.2%}")


def mean_interval(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The mean and a 95% bootstrap interval of it (values drawn with replacement)."""
    rng = random.Random(seed)
    resampled = sorted(statistics.mean(rng.choices(values, k=len(values))) for _ in range(draws))
    return statistics.mean(values), resampled[int(0.025 * draws)], resampled[int(0.975 * draws) - 1]


def run_phase(name: str, cycles: int, seed: int, size: LoopSize) -> None:
    """Run one phase and print its rows."""
    title = PHASES[name]
    load_start = os.getloadavg()
    started = time.monotonic()
    times, data = measure(cycles, seed, name, size)
    load_end = os.getloadavg()
    base = statistics.median(times["plain"])
    print(f"\n{title}: {cycles} cycles of one step per variant in a shuffled order, {time.monotonic() - started:.0f} s;"
          f" load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end")
    print(f"{'':18s}{'median step':>14s}{'against plain [95%]':>32s}{'% of the plain step':>24s}")
    print(f"{'plain':18s}{base * 1e6:>11.1f} µs")
    for variant in list(times)[1:]:
        diff, low, high = difference(times, variant)
        print(f"{variant:18s}{statistics.median(times[variant]) * 1e6:>11.1f} µs"
              f"{diff * 1e6:>+12.1f} µs [{low * 1e6:+.1f}, {high * 1e6:+.1f}]"
              f"{diff / base * 100:>+14.2f}% [{low / base * 100:+.2f}, {high / base * 100:+.2f}]")
    if name != "plain path":
        print("(copies of the loop: each landed elsewhere in memory, which moves a copy's speed by up to a per cent or"
              " so beyond this interval; 'plain, a copy' shows two plain copies' offset)")
    if name == "default":
        mean_diff = statistics.mean(times["gpufly, default"]) / statistics.mean(times["plain"]) - 1
        detailed = sum(step.detailed for step in data.steps)
        print(f"gpufly, default: {detailed} of {len(data.steps)} steps detailed; mean step {mean_diff:+.2%} against "
              f"the plain one's (no interval: a few slow steps move it)")
    overhead = data.overhead
    if overhead is not None and overhead.per_step_s is not None:
        print(f"gpufly says: {overhead.per_step_s * 1e6:.1f} µs per step of its own time "
              f"({overhead.per_step_s / base * 100:.2f}% of the plain step), timed inside its code")


if __name__ == "__main__":
    main()
