"""What the profiler costs a step it does not look inside, measured step by step against plain steps of the same loop.

``profile_overhead.py`` compares blocks of 1000 steps run one way and then another, and on a shared VM a block's
speed moves by several per cent from one second to the next: its intervals are about ±1.5% wide, as wide as the 2%
target. Here every cycle runs one step of each variant, in an order shuffled cycle by cycle, so the machine's drift
falls on all of them alike and the comparison resolves a few tenths of a per cent. What it measures is narrower:
the profiler's plain path (``prof.loader`` and ``with prof.step()`` on a step it does not look inside), which is
what 95% of a long run's steps pay. The detailed steps and their windows change the process for every step while
they are open (hooks on the model, wrappers on ``torch.Tensor``), so they cannot be interleaved step by step:
``profile_overhead.py`` measures them, with everything else.

Variants, each with its own iterator over the same DataLoader (the ~1 ms loop of ``profile_overhead.py``):

- ``plain``: the step as written;
- ``plain again``: the same, as a variant of its own (an A/A check: what it reads is the method's own error);
- ``wrapping alone``: the batch through a bare generator and the step inside an empty context manager, the
  structure of the profiler's two lines with nothing in them: the floor any such wrapping costs;
- ``gpufly``: the batch through ``prof.loader``, the step inside ``with prof.step()``, a profiler whose schedule
  opens no window (its own time still sampled as by default).

A second phase measures a detailed step the same way. Its profiler looks inside every step, so its hooks stay on
its model: it gets a model, optimizer and loader of its own (a copy, built from the same seed), and the plain steps
it is set against run on another copy, with a third copy's plain steps beside them as the check that copies alone
change nothing. The sync counter stays out of this phase: it wraps ``torch.Tensor`` for every model in the process
(its cost, about 1.5 µs per wrapped call, is in docs/profile.md), and so does the memory reading, which this
schedule would take on every step and the default takes on the last step of each window (about 13 µs). The default
schedule looks inside 40 of a 1000-step run's first steps (4%, then fewer); the last line combines the two phases
into what such a run's steps pay, apart from what those two and the opening and closing of each window add, which
``profile_overhead.py`` measures with everything else.

Each step is timed from outside, from the end of the step before (whatever variant ran it) to its own end, the
fetch included. The figure is the variant's median step against the plain one's, with a 95% bootstrap interval
over cycles (the cycle's steps drawn together). ``gpufly says`` is its own time per step, timed inside it.

Run: ``python benchmarks/profile_plain_steps.py [--cycles 10000]`` (about 2 minutes per 10,000 cycles on the 2-vCPU
VM).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from profile_overhead import LOOPS, Loop

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


def detailed_variants(prof: gpufly.Profiler) -> dict[str, Callable[[], None]]:
    """Plain steps on one copy of the loop, plain steps on another, and every-step-detailed ones on a third."""
    base, copy, watched = (Loop.build(LOOPS[0], "cpu") for _ in range(3))
    prof.syncs.arm = lambda: False  # type: ignore[method-assign]  # the sync counter out: see the module's docstring
    prof.steps.read_memory = lambda: None  # every step would read it here; the default schedule, one step a window
    prof.watch(watched.model, watched.optimizer)  # starts the profiler: its first step is detailed
    base_feed, copy_feed = Feed(lambda: iter(base.loader)), Feed(lambda: iter(copy.loader))
    watched_feed = Feed(lambda: prof.loader(watched.loader))

    def plain() -> None:
        x, y = base_feed.next()
        base.step(x, y)

    def plain_copy() -> None:
        x, y = copy_feed.next()
        copy.step(x, y)

    def detailed() -> None:
        x, y = watched_feed.next()
        with prof.step():
            watched.step(x, y)

    return {"plain": plain, "plain, a copy": plain_copy, "gpufly, detailed": detailed}


def measure(cycles: int, seed: int, detailed: bool = False) -> tuple[dict[str, list[float]], ProfileData]:
    """Each variant's step times over ``cycles`` shuffled cycles, and the profiler's data. ``detailed``: the second
    phase (every step looked inside, on copies of the loop)."""
    torch.set_num_threads(1)
    if detailed:
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None, sampling=EVERY_STEP)
        runs = detailed_variants(prof)
    else:
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None, sampling=NO_WINDOW)
        runs = variants(Loop.build(LOOPS[0], "cpu"), prof)
    names = list(runs)
    for _ in range(50):  # warm every variant (and torch's allocator) before anything is kept
        for name in names:
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
    args = parser.parse_args()
    if args.cycles < 100:
        parser.error("--cycles must be at least 100")
    size = LOOPS[0]
    print(f"the profiler's cost step by step, on cpu ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs), torch {torch.__version__}, Python {sys.version.split()[0]}, 1 torch thread; "
          f"loop: MLP 512-{size.width}-{size.width}-10, Adam, batch {size.batch}")
    plain_path = phase("plain steps (one loop, shared)", args.cycles, args.seed, detailed=False)
    detailed = phase("detailed steps (copies of the loop; sync counter out)", args.cycles, args.seed, detailed=True)
    share = DEFAULT_DETAILED_SHARE
    mean_cost = plain_path + share * (detailed - plain_path)
    print(f"\na run of the default schedule ({share:.0%} of its steps detailed): its mean step pays about "
          f"{mean_cost * 1e6:.1f} µs, the plain path's {plain_path * 1e6:.1f} on {1 - share:.0%} of the steps and a "
          f"detailed step's {detailed * 1e6:.1f} on {share:.0%}; its median step, about the plain path's. Not in "
          f"these: the sync counter on its windows, the memory readings, and opening and closing each window "
          f"(profile_overhead.py measures them with the rest)")


DEFAULT_DETAILED_SHARE = 40 / 1000
"""The default schedule details the first 8 steps and two windows of 16 in a run's first 1000 (later runs fewer)."""


def phase(title: str, cycles: int, seed: int, detailed: bool) -> float:
    """Run one phase and print its rows; the profiled variant's median step against the plain one's (seconds)."""
    load_start = os.getloadavg()
    started = time.monotonic()
    times, data = measure(cycles, seed, detailed)
    load_end = os.getloadavg()
    base = statistics.median(times["plain"])
    print(f"\n{title}: {cycles} cycles of one step per variant in a shuffled order, {time.monotonic() - started:.0f} s;"
          f" load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end")
    print(f"{'':18s}{'median step':>14s}{'against plain [95%]':>32s}{'% of the plain step':>24s}")
    print(f"{'plain':18s}{base * 1e6:>11.1f} µs")
    profiled = 0.0
    for name in list(times)[1:]:
        diff, low, high = difference(times, name)
        print(f"{name:18s}{statistics.median(times[name]) * 1e6:>11.1f} µs"
              f"{diff * 1e6:>+12.1f} µs [{low * 1e6:+.1f}, {high * 1e6:+.1f}]"
              f"{diff / base * 100:>+14.2f}% [{low / base * 100:+.2f}, {high / base * 100:+.2f}]")
        if name.startswith("gpufly"):
            profiled = diff
    overhead = data.overhead
    if overhead is not None and overhead.per_step_s is not None:
        print(f"gpufly says: {overhead.per_step_s * 1e6:.1f} µs per step of its own time "
              f"({overhead.per_step_s / base * 100:.2f}% of the plain step), timed inside its code")
    return profiled


if __name__ == "__main__":
    main()
