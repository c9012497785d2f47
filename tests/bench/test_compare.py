"""Two runs side by side: the recorded one-thread and two-thread CPU runs, and hand-made edge cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpufly.bench.compare import compare_runs
from gpufly.bench.results import load_run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "bench"


@pytest.fixture(scope="module")
def runs():
    return load_run(FIXTURES / "cpu_quick_1thread.json"), load_run(FIXTURES / "cpu_quick_2threads.json")


def test_ratios_are_b_over_a(runs) -> None:
    one, two = runs
    comparison = compare_runs(one, two, "1.json", "2.json")
    row = next(r for r in comparison.rows if r.name == "gemm.fp32")
    assert row.a == one.result("gemm.fp32").value and row.b == two.result("gemm.fp32").value
    assert row.ratio == pytest.approx(row.b / row.a) and row.b_speedup == pytest.approx(row.ratio)
    assert comparison.to_dict()["a"]["device"]["cpu_threads"] == 1


def test_every_benchmark_of_either_run_has_a_row(runs) -> None:
    one, two = runs
    rows = {r.name: r for r in compare_runs(one, two).rows}
    assert set(rows) == {r.name for r in one.results} | {r.name for r in two.results}
    assert rows["threads.gemm.fp32.t2"].a is None and rows["threads.gemm.fp32.t2"].note == "only in b"
    assert rows["threads.gemm.fp32.t2"].ratio is None


def test_a_latency_speedup_points_the_other_way(runs) -> None:
    one, _ = runs
    base = one.result("launch.op_dispatch")
    faster = dataclasses.replace(one, results=[dataclasses.replace(base, value=base.value / 2)])
    row = next(r for r in compare_runs(one, faster).rows if r.name == "launch.op_dispatch")
    assert row.ratio == pytest.approx(0.5) and row.b_speedup == pytest.approx(2.0)
    assert not row.higher_is_better


def test_different_sizes_are_pointed_out(runs) -> None:
    one, _ = runs
    base = one.result("gemm.fp32")
    other = dataclasses.replace(base, params={**base.params, "shape": "n=99"})
    row = next(r for r in compare_runs(one, dataclasses.replace(one, results=[other])).rows if r.name == "gemm.fp32")
    assert row.note == f"not comparable: sizes differ: shape {base.params['shape']} vs n=99"
    assert row.verdict == "not comparable"


def _with_interval(run, name: str, value: float, low: float, high: float, *, noisy: bool = False):
    base = run.result(name)
    result = dataclasses.replace(base, value=value, value_low=low, value_high=high, noisy=noisy)
    return dataclasses.replace(run, results=[result])


@pytest.mark.parametrize(("a", "b", "verdict"), [
    ((100.0, 98.0, 102.0), (120.0, 118.0, 123.0), "faster"),
    ((100.0, 98.0, 102.0), (80.0, 78.0, 83.0), "slower"),
    ((100.0, 95.0, 105.0), (103.0, 101.0, 106.0), "within noise"),
])
def test_a_difference_is_beyond_noise_only_where_the_intervals_do_not_overlap(runs, a, b, verdict) -> None:
    one, _ = runs
    row = compare_runs(_with_interval(one, "gemm.fp32", *a), _with_interval(one, "gemm.fp32", *b)).rows[0]
    assert row.verdict == verdict and row.to_dict()["verdict"] == verdict
    assert row.to_dict()["a_interval"] == list(a[1:])


def test_a_latency_that_dropped_beyond_noise_is_faster(runs) -> None:
    one, _ = runs
    row = compare_runs(_with_interval(one, "launch.op_dispatch", 4e-6, 3.9e-6, 4.1e-6),
                       _with_interval(one, "launch.op_dispatch", 2e-6, 1.9e-6, 2.1e-6)).rows[0]
    assert row.verdict == "faster" and row.b_speedup == pytest.approx(2.0)


def test_a_noisy_figure_is_named_and_runs_without_intervals_say_so(runs) -> None:
    one, two = runs
    row = compare_runs(_with_interval(one, "gemm.fp32", 10.0, 9.9, 10.1),
                       _with_interval(one, "gemm.fp32", 100.0, 60.0, 150.0, noisy=True)).rows[0]
    assert row.verdict == "noisy" and row.note == "noisy in b"
    assert next(r for r in compare_runs(one, two).rows if r.name == "gemm.fp32").verdict == "no interval"


def test_other_busy_processes_during_a_steady_figure_are_noted(runs) -> None:
    one, _ = runs
    busy = dataclasses.replace(one.result("gemm.fp32"), value_low=1.0, value_high=2.0,
                               conditions={"end": {"busy_processes": [{"pid": 9, "name": "make", "cpu_percent": 40}]}})
    row = compare_runs(one, dataclasses.replace(one, results=[busy])).rows[0]
    assert row.note == "other processes busy during b"


@pytest.mark.parametrize("busy_side", ["a", "b"])
def test_a_difference_measured_beside_busy_processes_is_disturbed_not_faster_or_slower(runs, busy_side) -> None:
    # the probe's gemm.bf16: 1.68 TFLOP/s (1.67-1.73) quiet, then 0.66 (0.64-0.69) beside a python at 101% CPU
    one, _ = runs
    quiet = _with_interval(one, "gemm.fp32", 1.68e12, 1.67e12, 1.73e12)
    loaded = _with_interval(one, "gemm.fp32", 0.66e12, 0.64e12, 0.69e12)
    loaded = dataclasses.replace(loaded, results=[dataclasses.replace(loaded.results[0], conditions={
        "start": {"busy_processes": [{"pid": 13550, "name": "python", "cpu_percent": 101.0}]}, "end": {}})])
    a, b = (quiet, loaded) if busy_side == "b" else (loaded, quiet)
    row = compare_runs(a, b).rows[0]
    assert row.verdict == "disturbed" and row.busy == (busy_side,)
    assert row.note == f"other processes busy during {busy_side}"
    assert row.to_dict()["verdict"] == "disturbed" and row.to_dict()["busy"] == [busy_side]
    assert compare_runs(quiet, quiet).rows[0].to_dict()["busy"] == []


def _swept(run, name: str, value: float, low: float, high: float, sweep: dict[int, float]):
    """``name`` as a swept figure: measured at the sweep's best size, with the sweep's rate at each size."""
    base = run.result(name)
    best = max(sweep, key=sweep.__getitem__)
    points = [{"size": size, "median_s": 1.0, "value": rate} for size, rate in sorted(sweep.items())]
    result = dataclasses.replace(base, value=value, value_low=low, value_high=high,
                                 params={**base.params, "shape": f"n={best}", "sweep": points})
    return dataclasses.replace(run, results=[result])


def test_figures_from_different_best_sizes_are_not_comparable(runs) -> None:
    one, _ = runs
    a = _swept(one, "gemm.int8", 2.18e12, 2.15e12, 2.2e12, {1024: 1.5e12, 2048: 2.0e12, 3072: 2.3e12})
    b = _swept(one, "gemm.int8", 3.88e12, 3.8e12, 3.9e12, {1024: 2.5e12, 2048: 3.9e12, 3072: 3.7e12})
    row = compare_runs(a, b).rows[0]
    assert row.verdict == "not comparable" and row.to_dict()["verdict"] == "not comparable"
    assert row.note == "not comparable: best sizes differ (3072 vs 2048)"
    assert row.b_speedup == pytest.approx(3.88 / 2.18)


def test_a_difference_no_larger_than_the_sweeps_own_spread_is_not_a_speedup(runs) -> None:
    one, _ = runs
    # a's sweep measured 2.9 at n=2048 where its figure is 2.2: one measurement of a size moves 32% from the next
    a = _swept(one, "gemm.int8", 2.2e12, 2.15e12, 2.25e12, {1024: 1.5e12, 2048: 2.9e12})
    b = _swept(one, "gemm.int8", 2.8e12, 2.75e12, 2.85e12, {1024: 1.6e12, 2048: 2.85e12})
    row = compare_runs(a, b).rows[0]
    assert row.sweep_spread == pytest.approx(2.9 / 2.2 - 1)
    assert row.verdict == "within the sweep's spread"
    assert row.note == "within the sweep's spread: a sweep and its figure at the same size differ by up to 32%"
    beyond = _swept(one, "gemm.int8", 4.0e12, 3.9e12, 4.1e12, {1024: 1.6e12, 2048: 4.1e12})
    assert compare_runs(a, beyond).rows[0].verdict == "faster"


def test_the_speedup_range_follows_from_both_intervals(runs) -> None:
    one, _ = runs
    row = compare_runs(_with_interval(one, "gemm.fp32", 100.0, 98.0, 102.0),
                       _with_interval(one, "gemm.fp32", 120.0, 118.0, 123.0)).rows[0]
    assert row.speedup_range == pytest.approx((118 / 102, 123 / 98))
    assert row.to_dict()["b_speedup_range"] == pytest.approx([118 / 102, 123 / 98])
    latency = compare_runs(_with_interval(one, "launch.op_dispatch", 4e-6, 3.9e-6, 4.1e-6),
                           _with_interval(one, "launch.op_dispatch", 2e-6, 1.9e-6, 2.1e-6)).rows[0]
    assert latency.speedup_range == pytest.approx((3.9 / 2.1, 4.1 / 1.9))
