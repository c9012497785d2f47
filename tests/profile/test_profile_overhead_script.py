"""benchmarks/profile_overhead.py: how its summary judges a figure against a target, what it refuses, and a short
run of both its parts (blocks and step by step) printing every row and a verdict for each loop.

The figures themselves are wall-clock measurements and are not asserted here."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

from .benchmark_scripts import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "profile_overhead.py"


def load() -> ModuleType:
    return load_benchmark("profile_overhead")


def test_a_figure_is_met_only_when_its_whole_interval_is_under_the_target() -> None:
    script = load()
    one_ms = script.LOOPS[0]
    assert script.Verdict(one_ms, (0.010, 0.006, 0.014), 0.9e-3).words.startswith("met: ")
    assert script.Verdict(one_ms, (0.010, 0.006, 0.024), 0.9e-3).words.startswith("met at the median, not resolved")
    assert script.Verdict(one_ms, (0.025, 0.021, 0.030), 0.9e-3).words.startswith("missed")


def test_a_step_slower_than_the_loop_stands_for_is_judged_at_the_nominal_step() -> None:
    script = load()
    one_ms = script.LOOPS[0]
    slow = script.Verdict(one_ms, (0.010, 0.006, 0.014), 1.5e-3)
    assert slow.scale == pytest.approx(1.5)
    assert slow.judged == pytest.approx((0.015, 0.009, 0.021))
    assert slow.words.startswith("met at the median, not resolved"), "1.4% of a 1.5 ms step is 2.1% of a 1 ms one"
    fast = script.Verdict(one_ms, (0.010, 0.006, 0.014), 0.8e-3)
    assert fast.judged == pytest.approx(fast.figure), "a faster step is not scaled down"
    thirty = script.Verdict(script.LOOPS[1], (0.002, -0.001, 0.004), 36e-3)
    assert thirty.words.startswith("missed") is False and thirty.judged[2] == pytest.approx(0.004 * 36 / 30)


def torch_sees_a_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(("arguments", "message"), [
    (["--step-processes", "1"], "--step-processes must be at least 2"),
    (["--step-cycles", "5"], "--step-cycles must be at least 100"),
    (["--rounds", "0"], "--rounds and --processes must be at least 1"),
    pytest.param(["--device", "cuda"], "sees no CUDA GPU here", marks=pytest.mark.skipif(
        torch_sees_a_gpu(), reason="a GPU is here: the run would start")),
])
@pytest.mark.slow
def test_bad_arguments_are_refused_with_one_error_line(arguments: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_short_run_prints_every_variant_and_a_verdict_for_each_loop() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1", "--processes", "1", "--step-processes", "2",
                             "--step-cycles", "102"], capture_output=True, text=True, timeout=600, check=True)
    lines = result.stdout.splitlines()
    for variant in ("plain again", "gpufly", "gpufly profile", "torch.profiler"):
        assert sum(line.startswith(f"{variant} ") for line in lines) >= 2, result.stdout  # a row on each loop
    assert sum(line.startswith("gpufly, default ") for line in lines) == 2, result.stdout
    assert "102 cycles in each of 2 processes" in result.stdout
    verdicts = [line for line in lines if line.startswith(("~1 ms step: gpufly", "~30 ms step: gpufly"))]
    assert len(verdicts) == 2 and all(" -> " in line for line in verdicts), result.stdout
    assert sum("torch.profiler on the same loop (blocks)" in line for line in lines) == 2, result.stdout
