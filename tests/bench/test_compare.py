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
    assert row.note == f"sizes differ: shape {base.params['shape']} vs n=99"


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
