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
