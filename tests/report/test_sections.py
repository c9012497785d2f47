"""Each section of the report, composed from recorded machines: the stage that owns it computes it, the report
only gathers them and ranks what to do next."""

from __future__ import annotations

import json

import pytest

from gpufly.errors import GpuflyError
from gpufly.report import SECTIONS, build_report, compose, ladder_place, reach
from gpufly.report.models_fit import DEFAULT_BUDGET_USD, JOB_KINDS

from .machines import h100_bench, no_driver, scenario, two_gpus


def test_a_gpu_is_placed_among_its_neighbours_by_dense_16_bit_rate(catalog) -> None:
    place = ladder_place(catalog.get("h100-sxm"), catalog.specs)
    rates = [peer.dense_16bit_tflops or 0.0 for peer in place.peers]
    assert rates == sorted(rates, reverse=True)
    assert [peer.name for peer in place.peers if peer.this] == ["H100 SXM"]
    assert len(place.peers) == 7 and place.peers[3].this, "three neighbours each side"
    assert place.rank is not None and place.of > 50 and 1 <= place.rank <= 20
    assert place.summary == f"H100 SXM: #{place.rank} of {place.of} by dense 16-bit tensor rate"


def test_the_fastest_card_has_no_one_above_it(catalog) -> None:
    best = max((spec for spec in catalog.specs if spec.vendor == "nvidia" and spec.bf16_tensor_tflops),
               key=lambda spec: (spec.bf16_tensor_tflops, spec.memory_bandwidth_gbps))
    place = ladder_place(best, catalog.specs)
    assert place.rank == 1 and place.peers[0].this and len(place.peers) == 4


def test_a_machine_with_gpus_gets_every_section() -> None:
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False, bench=h100_bench(),
                     bench_source="bench.json")
    data = report.to_dict()
    assert data["sections"] == list(SECTIONS)
    assert [place["gpu"] for place in data["ladder"]] == ["H100 SXM", "A100 80GB SXM"]
    assert data["setup"]["install"]["command"].startswith("pip install torch")
    assert data["setup"]["note"].startswith("frameworks read from installed files"), "the fast path says so"
    assert {row["gpu"] for row in data["fits"]["models"]} == {"H100 SXM", "A100 80GB SXM"}
    assert data["fits"]["buy"] == [] and data["fits"]["budget_usd"] is None
    assert {row["job"] for row in data["fits"]["models"]} == {"infer bf16", "infer Q8_0", "infer Q4_K_M", "LoRA",
                                                             "QLoRA", "full training"}
    assert data["reaches"]["figures"][0]["interval"] == "98% interval of the median"
    json.dumps(data)


def test_a_row_that_does_not_fit_has_no_speed_and_each_speed_carries_the_estimates_own_range() -> None:
    from gpufly.catalog import default_catalog
    from gpufly.estimate import fit
    from gpufly.models.resolve import load_model

    report = compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False)
    rows = report.to_dict()["fits"]["models"]
    assert any(not row["fits"] for row in rows) and any(row["fits"] for row in rows)
    for row in rows:
        assert (row["speed"] is not None) == row["fits"], row
        assert (row["speed_range"] is not None) == row["fits"], row
        assert 0 < row["median_error"] < 0.5
        if row["speed_range"]:
            assert row["speed_range"]["low"] < row["speed"] < row["speed_range"]["high"]
    infer = next(row for row in report.models if row.fits and row.task == "infer")
    job = next(kind for kind in JOB_KINDS if kind.label == infer.job).job(load_model(infer.model_id))
    verdict = fit(load_model(infer.model_id), default_catalog().get(infer.gpu_id), job.with_(gpus=infer.gpus))
    band = verdict.speed_ranges["decode_tok_s"]
    assert (infer.speed_low, infer.speed_high) == (band.low, band.high), "the report shows the estimate's range"


def test_without_a_gpu_the_fits_are_for_gpus_to_buy_within_the_budget() -> None:
    report = compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False)
    assert report.models == [] and report.places == []
    assert report.budget_usd == DEFAULT_BUDGET_USD
    priced = [row for row in report.buys if row.gpu is not None]
    assert priced and all(row.price_usd is not None and row.price_usd <= DEFAULT_BUDGET_USD for row in priced)
    assert any(row.gpu is None for row in report.buys), "a 70B model trained in full fits nothing at $2,000"
    bigger = compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False, budget_usd=50_000)
    assert sum(row.gpu is not None for row in bigger.buys) > len(priced)


def test_a_bench_figure_carries_its_interval_in_its_own_unit() -> None:
    matmul, copy, launch = (reach(result) for result in h100_bench().results)
    assert matmul.low < matmul.value < matmul.high
    assert matmul.summary == "653 TFLOP/s (640-660 TFLOP/s), 66% of 989 TFLOP/s"
    assert copy.shown(copy.value) == "1,005 GB/s"
    assert launch.low < launch.value < launch.high and launch.shown(launch.value) == "6.5 us"
    assert launch.interval_text == "6.3-6.9 us"


def test_a_noisy_figure_is_marked_and_decides_no_action() -> None:
    from dataclasses import replace

    run = h100_bench()
    run.results[1] = replace(run.results[1], noisy=True, noise="load average 1.9 on 2 cores")
    report = compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False, bench=run,
                     bench_source="bench.json")
    assert report.reaches is not None
    copy = report.reaches.figures[1]
    assert copy.noisy and copy.summary.startswith("1,005 GB/s (990-1,010 GB/s, noisy)")
    assert all(action.section != "what it reaches" for action in report.actions)


def test_a_run_saved_before_intervals_shows_the_spread_of_its_samples(tmp_path) -> None:
    from gpufly.bench import load_run
    from tests.fakes.nvml import FIXTURES

    run = load_run(FIXTURES / "bench" / "cpu_quick_2threads.json")
    figure = reach(run.results[0])
    assert figure.interval == "p10-p90 of the timed repeats"
    assert figure.peak is None and figure.shown(figure.value) == "104 GFLOP/s"


def test_next_actions_put_a_failed_check_first_then_bounds() -> None:
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False, bench=h100_bench(),
                     bench_source="bench.json")
    first, second = report.actions[:2]
    assert first.section == "set-up" and first.gain_text == "unblocks the GPU stack"
    assert first.command.startswith("pip install torch")
    assert second.section == "what it reaches" and second.gain_text == "up to 3.33x"
    assert "memory.copy" in second.title


def test_a_finding_ranked_by_priority_claims_no_gain() -> None:
    """A CPU run's .item() finding ranks at 0.1 but measured nothing it would save: no "up to 1.11x"."""
    from gpufly.report.actions import profile_actions

    ranked = profile_actions({"findings": [{"title": "Host-device syncs in the loop", "seen": "10 calls",
                                            "change": "call .item() every N steps", "weight": 0.1,
                                            "explains": None}]})
    assert ranked[0].gain is None and "1.11" not in ranked[0].gain_text


def test_a_tuned_speedup_outranks_an_upper_bound(tmp_path) -> None:
    from gpufly.report import TuneSummary

    tuned = TuneSummary(trials=6, best="amp=bf16+channels_last", speedup=1.8, knobs={"amp": "bf16"},
                        code=("with torch.autocast(...):",), unsafe=1, failed=0)
    profile = {"findings": [{"title": "The loop waits for its input", "seen": "40% of step time",
                             "change": "DataLoader(num_workers=4)", "weight": 0.4, "explains": 0.4}]}
    report = compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False, tune=tuned, profile=profile)
    titles = [(a.section, a.gain_text) for a in report.actions]
    assert titles[:2] == [("tune", "1.80x measured"), ("profile", "up to 1.67x")]


def test_bench_and_bench_file_together_are_refused(tmp_path) -> None:
    with pytest.raises(GpuflyError, match="--bench and --bench-file"):
        build_report(bench=True, bench_file=tmp_path / "bench.json")
    with pytest.raises(GpuflyError, match="--budget must be positive"):
        build_report(budget_usd=-5)
