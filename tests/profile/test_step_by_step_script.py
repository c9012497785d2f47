"""benchmarks/profile_step_by_step.py runs its variants interleaved and prints a row for each against the plain one.

Its figures are wall-clock measurements and are not asserted here; what is: every variant ran the same number of
steps, the plain-path profiler looked inside none of them, the detailed one every one (without the sync counter) and
the default one its first 8 (with it), and the difference's interval is built from the figures given (a fake set
with a known offset)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parent.parent.parent / "benchmarks" / "profile_step_by_step.py"


def load() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("profile_step_by_step", SCRIPT)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_the_difference_is_the_median_offset_with_an_interval_around_it() -> None:
    script = load()
    base = [1.0 + (i % 7) * 0.01 for i in range(700)]
    times = {"plain": base, "slower": [t + 0.005 for t in base]}
    diff, low, high = script.difference(times, "slower", draws=50)
    assert diff == pytest.approx(0.005)
    assert low <= diff <= high and high - low < 0.001, "a constant offset is resolved to within its spread"


@pytest.mark.slow
def test_the_script_runs_every_variant_of_each_phase_on_as_many_steps_detailed_as_its_schedule_says() -> None:
    script = load()
    times, data = script.measure(cycles=100, seed=1)
    assert list(times) == ["plain", "plain again", "wrapping alone", "gpufly"]
    assert {len(steps) for steps in times.values()} == {100}
    assert data.steps and not any(step.detailed for step in data.steps)
    times, data = script.measure(cycles=100, seed=1, phase="detailed")
    assert list(times) == ["plain", "plain, a copy", "gpufly, detailed"]
    assert {len(steps) for steps in times.values()} == {100}
    assert data.steps and all(step.detailed and not step.syncs_counted for step in data.steps)
    times, data = script.measure(cycles=100, seed=1, phase="default")
    assert list(times) == ["plain", "plain, a copy", "gpufly, default"]
    assert {len(steps) for steps in times.values()} == {100}
    detailed = [step.index for step in data.steps if step.detailed]
    assert detailed[:8] == list(range(8)) and all(data.steps[i].syncs_counted for i in range(8)), \
        "the profiled variant was not warmed: its first steps, detailed with the sync counter in, are measured"
    result = subprocess.run([sys.executable, str(SCRIPT), "--cycles", "100"], capture_output=True, text=True,
                            timeout=300, check=True)
    starts = [line.split("  ")[0] for line in result.stdout.splitlines()]
    for row in ("plain", "plain again", "wrapping alone", "gpufly", "plain, a copy", "gpufly, detailed",
                "gpufly, default"):
        assert row in starts, result.stdout
    assert result.stdout.count("gpufly says:") == 3 and "8 of 100 steps detailed" in result.stdout


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

