"""The GPU bench on a real GPU (skipped without one): it runs whole and saves what it prints, and its figures sit
below the datasheet peaks. How long the whole bench takes, and how its CUDA-event timing compares with a
synchronized wall clock (`benchmarks/bench_harness.py --device cuda`), are figures scripts/device_check.sh records
for docs/measurements, not assertions: two timings on one machine are not a test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufly.bench.results import load_run

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> tuple[dict, Path]:
    """One whole `gpufly bench` on cuda:0, or the run scripts/device_check.sh just saved (GPUFLY_BENCH_RUN), so a
    short lease on a GPU machine pays for the bench once."""
    saved = os.environ.get("GPUFLY_BENCH_RUN")
    if saved:
        run = load_run(Path(saved))
        assert run.finished_at, "the saved bench run did not finish"
        return run.to_dict(), Path(saved)
    save = tmp_path_factory.mktemp("bench") / "gpu.json"
    done = subprocess.run([sys.executable, "-m", "gpufly", "bench", "--device", "cuda:0", "--json", "--save",
                           str(save)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), save


def test_the_whole_gpu_bench_runs_and_saves_what_it_prints(full_run) -> None:
    data, save = full_run
    assert load_run(save).to_dict() == data
    names = {r["name"] for r in data["results"]} | {e["name"] for e in data["errors"]}
    for name in ("gemm.fp32", "gemm.tf32", "gemm.bf16", "memory.copy", "transfer.h2d.pinned", "launch.step_graph"):
        assert name in names
    assert {"gemm.bf16", "memory.copy", "transfer.h2d.pinned"} <= {r["name"] for r in data["results"]}, data["errors"]


def test_gpu_facts_are_recorded(full_run) -> None:
    device = full_run[0]["device"]
    assert device["kind"] == "cuda" and device["cuda_version"] and device["driver_version"]
    assert device["memory_total_bytes"] > 0 and device["compute_capability"]
    assert device["sm_clock_max_mhz"] and device["power_limit_w"]


def test_figures_sit_below_their_peaks(full_run) -> None:
    data = full_run[0]
    if data["device"]["catalog_id"] is None:
        pytest.skip(f"{data['device']['name']} is not in the catalog")
    checked = [r for r in data["results"] if r["percent_of_peak"] is not None]
    assert checked
    for result in checked:
        assert 1 < result["percent_of_peak"] < 110, result["name"]
    assert {r["name"]: r for r in checked}["memory.copy"]["percent_of_peak"] > 30


def test_cuda_graphs_are_faster_than_eager_launches(full_run) -> None:
    results = {r["name"]: r for r in full_run[0]["results"]}
    assert results["launch.step_graph"]["value"] < results["launch.step_eager"]["value"]
    assert 0 < results["launch.eager"]["value"] < 1e-3


def test_tf32_is_faster_than_fp32(full_run) -> None:
    results = {r["name"]: r for r in full_run[0]["results"]}
    assert results["gemm.tf32"]["value"] > 1.5 * results["gemm.fp32"]["value"]


def test_decode_matmuls_are_timed_as_replayed_cuda_graphs(full_run) -> None:
    decode = [r for r in full_run[0]["results"] if ".decode." in r["name"]]
    assert decode
    assert all(r["params"].get("timing") == "cuda_graph" for r in decode), [r["params"].get("timing") for r in decode]


def test_gemm_ceilings_come_from_a_sweep_and_every_figure_has_its_interval(full_run) -> None:
    results = {r["name"]: r for r in full_run[0]["results"]}
    sweep = results["gemm.bf16"]["params"]["sweep"]
    assert len(sweep) >= 3 and results["gemm.bf16"]["params"]["shape"] in {f"n={p['size']}" for p in sweep}
    for result in results.values():
        assert result["value_low"] <= result["value"] <= result["value_high"], result["name"]
        assert result["noisy"] == (result["noise"] is not None), result["name"]
        assert "start" in result["conditions"] and "end" in result["conditions"]
