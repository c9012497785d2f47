"""benchmarks/profile_step_by_step.py runs its variants interleaved and prints a row for each against the plain one.

Its figures are wall-clock measurements and are not asserted here; what is: every variant ran the same number of
steps, the plain-path profiler looked inside none of them, the detailed one every one (without the sync counter) and
the default one its first 8 (with it), each copy of the loop was profiled in one segment of a phase on copies and
plain in the others (so where a copy landed in memory cancels), and the figures' intervals are built from the figures
given (fake sets with known offsets)."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

from .benchmark_scripts import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "profile_step_by_step.py"


def load() -> ModuleType:
    return load_benchmark("profile_step_by_step")


def test_the_figure_is_the_median_offset_with_an_interval_around_it() -> None:
    script = load()
    base = [1.0 + (i % 7) * 0.01 for i in range(700)]
    times = {"plain": base, "slower": [t * 1.005 for t in base]}
    figure, low, high = script.relative([times], "slower", draws=50)
    assert figure == pytest.approx(0.005)
    assert low <= figure <= high and high - low < 0.001, "a constant offset is resolved to within its spread"


def test_over_segments_an_offset_that_each_copy_brings_to_its_role_cancels() -> None:
    script = load()
    base = [1.0 + (i % 7) * 0.01 for i in range(300)]
    copy_speed = (1.00, 1.02, 0.98)  # where each copy landed in memory: +2% and -2% against the first
    segments = []
    for turn in range(3):  # as measure() gives them: copy ``turn`` profiled (+1%), the next plain, the third a check
        profiled, plain, check = (copy_speed[(turn + k) % 3] for k in range(3))
        segments.append({"plain": [t * plain for t in base], "plain, a copy": [t * check for t in base],
                         "profiled": [t * profiled * 1.01 for t in base]})
    figure, low, high = script.relative(segments, "profiled", draws=50)
    assert figure == pytest.approx(0.01, abs=2e-4), "the copies' offsets cancel over the three segments"
    assert low <= figure <= high
    assert script.relative(segments, "plain, a copy", draws=50)[0] == pytest.approx(0.0, abs=2e-4)
    assert script.relative(segments[:1], "profiled", draws=50)[0] == pytest.approx(1.00 * 1.01 / 1.02 - 1), \
        "one segment alone carries its copies' offset"


@pytest.mark.slow
def test_the_script_runs_every_variant_of_each_phase_on_as_many_steps_detailed_as_its_schedule_says() -> None:
    script = load()
    segments, data = script.measure(cycles=100, seed=1)
    assert len(segments) == len(data) == 1
    assert list(segments[0]) == ["plain", "plain again", "wrapping alone", "gpufly"]
    assert {len(steps) for steps in segments[0].values()} == {100}
    assert data[0].steps and not any(step.detailed for step in data[0].steps)
    segments, data = script.measure(cycles=99, seed=1, phase="detailed")
    assert len(segments) == len(data) == 3, "three segments, each copy profiled in one"
    for times, profile in zip(segments, data, strict=True):
        assert list(times) == ["plain", "plain, a copy", "gpufly, detailed"]
        assert {len(steps) for steps in times.values()} == {33}
        assert profile.steps and all(step.detailed and not step.syncs_counted for step in profile.steps)
    segments, data = script.measure(cycles=99, seed=1, phase="default")
    for times, profile in zip(segments, data, strict=True):
        assert list(times) == ["plain", "plain, a copy", "gpufly, default"]
        assert {len(steps) for steps in times.values()} == {33}
        detailed = [step.index for step in profile.steps if step.detailed]
        assert detailed[:8] == list(range(8)) and all(profile.steps[i].syncs_counted for i in range(8)), \
            "the profiled variant was not warmed: its first steps, detailed with the sync counter in, are measured"
    result = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "100"], capture_output=True, text=True,
                            timeout=300, check=True)
    starts = [line.split("  ")[0] for line in result.stdout.splitlines()]
    for row in ("plain", "plain again", "wrapping alone", "gpufly", "plain, a copy", "gpufly, detailed",
                "gpufly, default"):
        assert row in starts, result.stdout
    assert result.stdout.count("gpufly says:") == 3 and "24 of 99 steps detailed" in result.stdout


def test_the_copies_take_each_role_once_over_the_segments() -> None:
    script = load()
    for seed in (0, 1, 5):  # measure() starts the turns at its seed
        segments = [script.roles(seed + turn) for turn in range(3)]
        for role in range(3):  # profiled, plain, the plain check
            assert sorted(segment[role] for segment in segments) == [0, 1, 2], segments


@pytest.mark.slow
def test_too_few_cycles_is_refused_with_one_error_line() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "5"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert "--cycles must be at least 100" in result.stderr


def test_the_pooled_figure_is_the_mean_over_processes_with_an_interval_around_it() -> None:
    script = load()
    mean, low, high = script.mean_interval([0.01, 0.02, 0.03, 0.02], draws=200)
    assert mean == pytest.approx(0.02)
    assert 0.01 <= low <= mean <= high <= 0.03


@pytest.mark.slow
def test_a_phase_on_copies_runs_in_fresh_processes_and_prints_each_ones_figure() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "100", "--phases", "detailed", "--processes",
                             "2"], capture_output=True, text=True, timeout=300, check=True)
    rows = [line for line in result.stdout.splitlines() if line.startswith(("plain, a copy", "gpufly, detailed"))]
    each = [row.partition("each: ")[2].partition(")")[0].split(", ") for row in rows]
    assert len(rows) == 2 and [len(figures) for figures in each] == [2, 2], result.stdout  # two processes' figures
    assert "100 cycles in each of 2 processes" in result.stdout

