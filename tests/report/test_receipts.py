"""What the saved files carry reaches the report: a profile's interval, noisy mark and receipt (device, versions,
steps, batch), a profile of no step said as such, a tune run's receipt and noise floor, and a bench figure
measured beside busy processes tagged as `gpufly bench` tags it; in the terminal, the JSON and the page."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from gpufly.cli.report import render_report
from gpufly.profile.records import Conditions, LoopSettings, ProfileData, StepRecord
from gpufly.report import Report, compose, profile_summary, render_html, tune_summary

from .machines import h100_bench, no_driver, scenario, two_gpus

SETTINGS = LoopSettings(device="cpu", batch_size=32, torch_version="2.13.0+cpu", python_version="3.11.7",
                        gpufly_version="0.1.0", cpu_name="Intel(R) Xeon(R) Processor", cpu_threads=2)


def rendered(report: Report) -> str:
    out = Console(width=400, record=True, color_system=None)
    render_report(report, out)
    return out.export_text()


def section(page: str, key: str) -> str:
    found = re.search(rf'<section id="{key}".*?</section>', page, re.S)
    assert found, key
    return found.group(0)


def _profile(tmp_path: Path, data: ProfileData) -> dict:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data.to_dict()))
    return profile_summary(path)


@pytest.fixture
def noisy_profile(tmp_path: Path) -> dict:
    """61 steps around 20 ms with a spread far over half the median, as the probe's mlp.py on a busy CPU."""
    walls = [0.0007, 0.025, 0.02, 0.0099, 0.0236, 0.02, 0.0255, 0.0008, 0.02, 0.021] * 6 + [0.02]
    steps = [StepRecord(index=i, wall_s=wall, batch_size=32) for i, wall in enumerate(walls)]
    return _profile(tmp_path, ProfileData(steps=steps, settings=SETTINGS, command="mlp.py",
                                          conditions=Conditions(0.6, 0.71, 2)))


def test_a_profile_in_the_report_keeps_its_interval_its_noisy_mark_and_its_receipt(noisy_profile) -> None:
    assert noisy_profile["noise"]["noisy"], "the fixture is a noisy run"
    report = compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False, profile=noisy_profile)
    text = rendered(report)
    head = next(line for line in text.splitlines() if line.startswith("profile: mlp.py"))
    assert re.search(r"median \d+\.\d ms \[95%: [\d.]+-[\d.]+ ms\], noisy \(", head), head
    assert ("measured on CPU (Intel(R) Xeon(R) Processor, 2 threads); torch 2.13.0+cpu, Python 3.11.7, gpufly "
            "0.1.0; 61 steps (61 measured); batch 32") in text
    assert "noise floor: steps" in text and "load average 0.6 -> 0.71 on 2 CPUs" in text
    assert "noisy: step times spread over" in text
    page = section(render_html(report, "now"), "profile")
    assert re.search(r"median step \d+\.\d ms \[95%: [\d.]+-[\d.]+ ms\], noisy", page)
    assert "torch 2.13.0+cpu, Python 3.11.7, gpufly 0.1.0" in page and "batch 32" in page
    assert "noisy: step times spread over" in page
    data = report.to_dict()["profile"]
    assert data["receipt"]["batch_size"] == 32 and data["noise"]["noisy"] is True


def test_a_profile_of_no_step_says_that_no_step_was_measured_and_why(tmp_path: Path) -> None:
    profiled = _profile(tmp_path, ProfileData(settings=SETTINGS, command="raises.py", crash="ValueError: boom",
                                              exit_code=1))
    report = compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False, profile=profiled)
    text = rendered(report)
    head = next(line for line in text.splitlines() if line.startswith("profile: raises.py"))
    assert head.startswith("profile: raises.py: no step was measured: ")
    assert "ValueError: boom" in head and "other 100%" not in text and "median" not in head
    page = section(render_html(report, "now"), "profile")
    assert "no step was measured" in page and "ValueError: boom" in page
    assert "other" not in page and "profile-chart" not in page
    recorded = dict(profiled, no_step_reason="raises.py raised ValueError: boom before its first step ended")
    again = rendered(compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False, profile=recorded))
    assert "no step was measured: raises.py raised ValueError: boom before its first step ended" in again


def test_a_tune_run_in_the_report_carries_its_receipt_and_noise_floor_and_no_winner_is_null(tmp_path: Path) -> None:
    from gpufly.tune import GreedyPlan, ResultsLog, Search, run_identity
    from tests.tune.fakes import FakeMachine

    results = tmp_path / "noisy.jsonl"
    machine = FakeMachine({"fast": 1.25}, noise=0.3)
    Search(GreedyPlan({"fast": [True]}), ResultsLog(results),
           lambda trial: dataclasses.replace(machine(trial), batch_size=32),
           identity=run_identity("wl.py:workload", "train", 40, "cpu", "2.13.0+cpu")).run()
    tuned = tune_summary(results)
    assert tuned.verdict == "too noisy" and tuned.best is None
    report = compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False, tune=tuned)
    data = json.loads(json.dumps(report.to_dict()))["tune"]
    assert data["best"] is None and data["device"] == "cpu" and data["versions"] == {"torch": "2.13.0+cpu"}
    assert data["steps"] == 40 and data["batch_size"] == 32 and data["workload"] == "wl.py:workload"
    assert data["noise_floor"] > 0.1 and data["baseline_runs"] >= 2
    floor = f"noise floor {tuned.noise_floor:.1%} (the baseline's throughput over {tuned.baseline_runs} runs)"
    receipt = f"measured on: device cpu; torch 2.13.0+cpu; 40 steps per trial; batch 32 (the baseline's); {floor}"
    assert receipt in rendered(report)
    assert receipt.replace("'", "&#x27;") in section(render_html(report, "now"), "tune")


BUSY = {"start": {"busy_processes": [{"pid": 13550, "name": "python", "cpu_percent": 101.0}]}, "end": {}}


def test_a_bench_figure_measured_beside_busy_processes_is_tagged_and_decides_nothing() -> None:
    run = h100_bench()
    run.results[1] = dataclasses.replace(run.results[1], conditions=BUSY)  # memory.copy at 30% of its peak
    report = compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False, bench=run,
                     bench_source="bench.json")
    assert report.reaches is not None
    copy = report.reaches.figures[1]
    assert copy.others_busy and copy.busy == ("python (pid 13550) at 101% CPU",)
    assert copy.summary.startswith("1,005 GB/s (990-1,010 GB/s, others busy)")
    assert all(action.section != "what it reaches" for action in report.actions), "its shortfall may be the load"
    text = rendered(report)
    assert re.search(r"memory\.copy others busy\s", text)
    assert "others busy: memory.copy: python (pid 13550) at 101% CPU" in text
    assert not re.search(r"gemm\.bf16 others busy", text)
    figure = report.to_dict()["reaches"]["figures"][1]
    assert figure["others_busy"] is True and figure["busy"] == ["python (pid 13550) at 101% CPU"]
    page = section(render_html(report, "now"), "reaches")
    assert "others busy: python (pid 13550) at 101% CPU" in page and "a steady figure can still be low" in page
    noisy = dataclasses.replace(run.results[1], noisy=True, noise="interval 30% of the median")
    assert not compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False,
                       bench=dataclasses.replace(run, results=[noisy]), bench_source="b").reaches.figures[0].others_busy
