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
   change: where each landed in memory. That offset is not small: two plain copies of the 1 ms loop read -0.65% to
   +0.03% apart, and on the 30 ms loop the profiled copy ran 1.4% faster than the plain one, more than any cost of
   the profiler there. So the phase runs in three segments, a third of the cycles each, in which the three copies
   take the three roles in turn (a Latin square), each segment with a fresh profiler whose ``finish`` takes its
   hooks off before the next: over the three, each copy's offset falls once on the profiled figure and once on the
   plain one, and cancels, in ``plain, a copy`` as well. The figure is the geometric mean over the segments of the
   ratio of the variant's median step to the plain one's (an offset is a factor on a copy's speed). With
   ``--processes N`` the phase runs in N fresh processes and the figure is the mean over them, its interval drawn
   over processes. The sync counter and the memory readings stay out of this phase (the schedule would take a
   reading on every step; the default takes one a window).

3. **default**: the profiler as a user runs it (the default schedule: the first 8 steps detailed with the sync
   counter in, then windows of 16 at random places, the sync counter in one window of four, memory read once a
   window), on copies in turn as in phase 2 (so with three fresh profilers, three times the first 8 detailed
   steps). Everything it costs is in this figure, the windows' opening and closing included, with one thing to
   know: while the sync counter is in, it wraps ``torch.Tensor`` for every model in the process, so the plain steps
   of those cycles (about 1% of them) pay its wrappers too.

Each step is timed from outside, from the end of the step before (whatever variant ran it) to its own end, the
fetch included. The figure is the variant's median step against the plain one's (over segments, as above), with a
95% bootstrap interval over cycles (the cycle's steps drawn together, within each segment). ``gpufly says`` is its
own time per step, timed inside it.

Run: ``python benchmarks/profile_step_by_step.py [--cycles 10000] [--phases default] [--loop 1]`` (about 1 minute
per phase per 10,000 cycles on the 2-vCPU VM; ``--loop 1``, the ~30 ms loop, about 1.5 minutes per 1,000).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
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


def copies_variants(loops: list[Loop], prof: gpufly.Profiler, label: str, everything_in: bool,
                    turn: int = 0) -> dict[str, Callable[[], None]]:
    """Plain steps on one of the three copies in ``loops``, plain steps on another, and the profiler's (``label``) on
    the third (``turn``: which); with ``everything_in`` false, the sync counter and the memory readings kept out."""
    watched, base, copy = (loops[index] for index in roles(turn))
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


def roles(turn: int) -> tuple[int, int, int]:
    """Which of three copies is profiled, which is the plain baseline and which the plain check, in segment ``turn``:
    over three turns in a row, each copy takes each role once."""
    return turn % 3, (turn + 1) % 3, (turn + 2) % 3


PHASES = {
    "plain path": "plain steps (one loop, shared)",
    "detailed": "detailed steps (copies of the loop in turn; sync counter and memory readings out)",
    "default": "the default schedule, everything in (copies of the loop in turn)",
}
ON_COPIES = ("detailed", "default")

Times = dict[str, list[float]]
"""Each variant's step times, in the order they ran."""


def interleaved(runs: dict[str, Callable[[], None]], cycles: int, rng: random.Random) -> Times:
    """``cycles`` cycles of one step per variant, in an order shuffled each cycle; each step timed from the end of the
    one before (whichever variant ran it) to its own end."""
    names = list(runs)
    times: Times = {name: [] for name in names}
    order = names[:]
    clock = time.perf_counter
    last = clock()
    for _ in range(cycles):
        rng.shuffle(order)
        for name in order:
            runs[name]()
            now = clock()
            times[name].append(now - last)
            last = now
    return times


def warm(runs: list[Callable[[], None]], steps: int = 50) -> None:
    """Run each of ``runs`` ``steps`` times (and torch's allocator with them) before anything is kept."""
    for _ in range(steps):
        for run in runs:
            run()


def measure(cycles: int, seed: int, phase: str = "plain path",
            size: LoopSize = LOOPS[0]) -> tuple[list[Times], list[ProfileData]]:
    """For one of ``PHASES`` on the loop of ``size``: each segment's step times by variant, and its profiler's data.

    The plain path is one segment of ``cycles`` cycles on one loop. A phase on copies is three segments of a third of
    the cycles each, one per copy profiled (a Latin square: each of the three copies is profiled in one segment, the
    plain baseline in another and the plain check in the third), each with a fresh profiler, whose ``finish`` takes
    its hooks off before the next segment. A copy's place in memory moves its speed (two plain copies of the 1 ms
    loop read up to 0.65% apart, of the 30 ms loop 1.4%); taken over the three segments, those offsets cancel, in
    the profiler's figure and in the plain check's alike."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    if phase not in ON_COPIES:
        prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None, sampling=NO_WINDOW)
        runs = variants(Loop.build(size, "cpu"), prof)
        warm(list(runs.values()))
        times = interleaved(runs, cycles, rng)
        return [times], [prof.finish()]
    loops = [Loop.build(size, "cpu") for _ in range(3)]
    warm([partial(plain_step, loop) for loop in loops])  # not the profiled steps: their first ones count
    segments, data = [], []
    for turn in range(3):
        if phase == "detailed":
            prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None, sampling=EVERY_STEP)
            runs = copies_variants(loops, prof, "gpufly, detailed", everything_in=False, turn=seed + turn)
        else:
            prof = gpufly.Profiler(warmup=0, device="cpu", nvml_interval=None)
            runs = copies_variants(loops, prof, "gpufly, default", everything_in=True, turn=seed + turn)
        segments.append(interleaved(runs, max(cycles // 3, 1), rng))
        data.append(prof.finish())
    return segments, data


def plain_step(loop: Loop) -> None:
    """One plain step of ``loop`` on a batch of its own (the warm-up's)."""
    x, y = next(iter(loop.loader))
    loop.step(x, y)


def relative(segments: list[Times], name: str, draws: int = 400, seed: int = 0) -> tuple[float, float, float]:
    """The variant's median step against the plain one's (-1: 0.01 is 1% slower) over ``segments`` (their ratios'
    geometric mean, over which a copy's offset, a factor on its speed, cancels exactly), and a 95% interval from
    resampling whole cycles within each segment."""
    rng = random.Random(seed)

    def figure(picks: list[list[int] | None]) -> float:
        ratios = []
        for times, picked in zip(segments, picks, strict=True):
            ours, base = times[name], times["plain"]
            if picked is not None:
                ours, base = [ours[i] for i in picked], [base[i] for i in picked]
            ratios.append(statistics.median(ours) / statistics.median(base))
        return across(ratios)

    estimates = sorted(figure([rng.choices(range(len(times["plain"])), k=len(times["plain"])) for times in segments])
                       for _ in range(draws))
    return figure([None] * len(segments)), estimates[int(0.025 * draws)], estimates[int(0.975 * draws) - 1]


def across(ratios: list[float]) -> float:
    """Segments' ratios of a variant's step to the plain one's as one figure (-1): their geometric mean."""
    return math.exp(statistics.fmean(math.log(ratio) for ratio in ratios)) - 1


def mean_interval(values: list[float], draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """The mean and a 95% bootstrap interval of it (values drawn with replacement)."""
    rng = random.Random(seed)
    resampled = sorted(statistics.mean(rng.choices(values, k=len(values))) for _ in range(draws))
    return statistics.mean(values), resampled[int(0.025 * draws)], resampled[int(0.975 * draws) - 1]


@dataclass
class Pooled:
    """A phase run in fresh processes: per variant, each process's median step against plain (over its segments, as
    ``relative`` takes it), and its mean step likewise; the plain median step of each process."""

    phase: str
    cycles: int
    plain_steps_s: list[float]
    medians: dict[str, list[float]]
    means: dict[str, list[float]]
    seconds: float

    def figure(self, variant: str) -> tuple[float, float, float]:
        """The mean over processes of the variant's median step against plain, with a 95% interval over processes."""
        return mean_interval(self.medians[variant])

    @property
    def plain_step_s(self) -> float:
        return statistics.median(self.plain_steps_s)


def pooled(phase: str, cycles: int, processes: int, seed: int = 0, loop: int = 0) -> Pooled:
    """Run ``phase`` in ``processes`` fresh interpreters, one after another (seeds ``seed``, ``seed + 1``, ...: the
    order of the Latin square's segments moves with it), and gather each one's figures."""
    started = time.monotonic()
    outputs = []
    for process in range(processes):
        command = [sys.executable, __file__, "--worker", "--phases", phase, "--cycles", str(cycles),
                   "--seed", str(seed + process), "--loop", str(loop)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
            raise SystemExit(f"error: a worker process of the {phase!r} phase failed (exit {done.returncode}): {last}\n"
                             f"hint: run it alone to see all of it: {' '.join(command[1:])}")
        outputs.append(json.loads(done.stdout.splitlines()[-1]))
    names = list(outputs[0][0])
    result = Pooled(phase, cycles, [statistics.median(segment["plain"][0] for segment in output) for output in outputs],
                    {name: [] for name in names[1:]}, {name: [] for name in names[1:]}, time.monotonic() - started)
    for output in outputs:
        for name in names[1:]:
            result.medians[name].append(across([seg[name][0] / seg["plain"][0] for seg in output]))
            result.means[name].append(across([seg[name][1] / seg["plain"][1] for seg in output]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10_000, help="cycles of one step per variant (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the order within each cycle")
    parser.add_argument("--loop", type=int, choices=(0, 1), default=0,
                        help="0: the ~1 ms loop (default), 1: the ~30 ms one (about 30 times as long per cycle)")
    parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES),
                        help="which phases to run (default: all three)")
    parser.add_argument("--processes", type=int, default=1,
                        help="run the phases on copies of the loop in this many fresh processes, one after another, "
                             "and pool them, with an interval over processes (default 1: in this process)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cycles < 100:
        parser.error("--cycles must be at least 100")
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    size = LOOPS[args.loop]
    if args.worker:
        segments, _data = measure(args.cycles, args.seed, args.phases[0], size)
        print(json.dumps([{name: [statistics.median(steps), statistics.fmean(steps)] for name, steps in times.items()}
                          for times in segments]))
        return
    print(f"the profiler's cost step by step, on cpu ({platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs), torch {torch.__version__}, Python {sys.version.split()[0]}, 1 torch thread; "
          f"loop: MLP 512-{size.width}-{size.width}-10, Adam, batch {size.batch}")
    for name in args.phases:
        if name in ON_COPIES and args.processes > 1:
            print_pooled(pooled(name, args.cycles, args.processes, args.seed, args.loop))
        else:
            run_phase(name, args.cycles, args.seed, size)


def print_pooled(result: Pooled) -> None:
    """Each process's figures and their mean, with a 95% bootstrap interval over processes."""
    processes = len(result.plain_steps_s)
    print(f"\n{PHASES[result.phase]}: {result.cycles} cycles in each of {processes} processes, {result.seconds:.0f} s; "
          f"the plain median step {result.plain_step_s * 1e6:.1f} µs (median over processes)")
    for variant, medians in result.medians.items():
        mean, low, high = result.figure(variant)
        print(f"{variant:18s} median step {mean:+.2%} [{low:+.2%}, {high:+.2%}] against plain (mean over processes; "
              f"each: {', '.join(f'{value:+.2%}' for value in medians)}); mean step "
              f"{statistics.fmean(result.means[variant]):+.2%}")


def run_phase(name: str, cycles: int, seed: int, size: LoopSize) -> None:
    """Run one phase in this process and print its rows."""
    load_start = os.getloadavg()
    started = time.monotonic()
    segments, data = measure(cycles, seed, name, size)
    load_end = os.getloadavg()
    base = statistics.median(step for times in segments for step in times["plain"])
    how = "" if len(segments) == 1 else f" in {len(segments)} segments, each copy profiled in one"
    print(f"\n{PHASES[name]}: {cycles} cycles of one step per variant in a shuffled order{how}, "
          f"{time.monotonic() - started:.0f} s; load average {load_start[0]:.2f} at the start, "
          f"{load_end[0]:.2f} at the end")
    print(f"{'':18s}{'median step':>14s}{'against plain [95%]':>32s}{'% of the plain step':>24s}")
    print(f"{'plain':18s}{base * 1e6:>11.1f} µs")
    for variant in list(segments[0])[1:]:
        diff, low, high = relative(segments, variant)
        ours = statistics.median(step for times in segments for step in times[variant])
        print(f"{variant:18s}{ours * 1e6:>11.1f} µs{diff * base * 1e6:>+12.1f} µs [{low * base * 1e6:+.1f}, "
              f"{high * base * 1e6:+.1f}]{diff * 100:>+14.2f}% [{low * 100:+.2f}, {high * 100:+.2f}]")
    if name == "default":
        mean_diff = across([statistics.fmean(times["gpufly, default"]) / statistics.fmean(times["plain"])
                            for times in segments])
        steps = [step for profile in data for step in profile.steps]
        detailed = sum(step.detailed for step in steps)
        print(f"gpufly, default: {detailed} of {len(steps)} steps detailed (a fresh profiler in each segment: its "
              f"first 8 detailed); mean step {mean_diff:+.2%} against the plain one's (no interval: a few slow steps "
              "move it)")
    own = [profile.overhead.per_step_s for profile in data
           if profile.overhead is not None and profile.overhead.per_step_s is not None]
    if own:
        says = statistics.fmean(own)
        print(f"gpufly says: {says * 1e6:.1f} µs per step of its own time ({says / base * 100:.2f}% of the plain "
              "step), timed inside its code")


if __name__ == "__main__":
    main()
