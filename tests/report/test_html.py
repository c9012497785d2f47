"""`gpufly report --html`: one self-contained page with every section and chart, nothing to fetch."""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from gpufly.report import SECTIONS, TuneSummary, compose, render_html
from tests.fakes.nvml import FIXTURES, nvml_env

from .machines import h100_bench, no_driver, save, scenario, two_gpus

RESOURCE = re.compile(r"""<script|<link|<img|<iframe|<object|<embed|@import|url\(\s*(?!['"]?#)|\ssrc\s*=|"""
                      r"""href\s*=\s*(?!['"]?#)""", re.IGNORECASE)
"""Anything a browser would fetch: scripts, stylesheets, images, frames, CSS imports and urls, any src, any href
but a link to a place in the page."""


def external_references(page: str) -> list[str]:
    return RESOURCE.findall(page)


def sections_of(page: str) -> list[str]:
    return re.findall(r'<section id="([a-z]+)" data-section="\1">', page)


def charts_of(page: str) -> list[str]:
    return re.findall(r'<svg class="chart" id="([^"]+)"', page)


def test_every_section_and_chart_of_a_gpu_machine_is_on_the_page() -> None:
    tuned = TuneSummary(trials=6, best="amp=bf16", speedup=1.8, knobs={"amp": "bf16"},
                        code=("with torch.autocast(device.type, dtype=torch.bfloat16):",), unsafe=1, failed=0)
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False, bench=h100_bench(),
                     bench_source="bench.json", tune=tuned)
    page = render_html(report, "2026-01-01T00:00:00+00:00")
    assert sections_of(page) == [*SECTIONS, "tune"]
    assert set(charts_of(page)) == {
        "ladder-rate-h100-sxm", "ladder-bandwidth-h100-sxm", "ladder-vram-h100-sxm",
        "ladder-rate-a100-80gb-sxm", "ladder-bandwidth-a100-80gb-sxm", "ladder-vram-a100-80gb-sxm",
        "reaches-chart", "fits-infer-h100-sxm", "fits-train-h100-sxm", "fits-infer-a100-80gb-sxm",
        "fits-train-a100-80gb-sxm", "tune-chart"}
    assert "pip install torch==" in page and "98% interval of the median" in page
    for place in report.places:
        assert all(f"<code>{escape(url)}</code>" in page for peer in place.peers for url in peer.sources), \
            "every card charted has its datasheet URLs on the page, as text"
    assert external_references(page) == []


def test_every_chart_has_a_labelled_axis_with_its_unit() -> None:
    page = render_html(compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False,
                               bench=h100_bench(), bench_source="bench.json"), "now")
    for chart in re.findall(r"<svg .*?</svg>", page):
        label = re.search(r'class="axis-label"[^>]*>([^<]+)<', chart)
        assert label and re.search(r"\([^)]+\)", label.group(1)), chart[:200]


def test_a_machine_without_a_gpu_says_why_and_shows_gpus_to_buy() -> None:
    page = render_html(compose(no_driver(), scenario("healthy_cpu"), frameworks_imported=False), "now")
    assert sections_of(page) == list(SECTIONS)
    assert "no NVIDIA GPU: NVML library not found" in page
    assert "buy-chart" in charts_of(page) and "GPUs to get within $2,000" in page
    assert "not measured: <code>gpufly report --bench</code>" in page
    assert external_references(page) == []


def test_text_from_the_machine_is_escaped() -> None:
    machine = two_gpus()
    host = machine.host.__class__(**{**machine.host.to_dict(), "cpu_model": "<script>alert(1)</script>"})
    page = render_html(compose(machine.__class__(**{**machine.__dict__, "host": host}), scenario("healthy_gpu"),
                               frameworks_imported=False), "now")
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_the_page_check_catches_what_a_browser_would_fetch() -> None:
    assert external_references('<link rel="stylesheet" href="https://cdn.example/x.css">')
    assert external_references('<img src="chart.png">') and external_references("<script>x()</script>")
    assert external_references("body{background:url(https://example.com/a.png)}")
    assert external_references('<a href="#fits">fits</a> see https://example.com as text') == []


def test_the_command_writes_the_page_and_the_json_carries_every_section(cli, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    bench = save(h100_bench(), tmp_path)
    result = cli("report", "--html", str(page), "--bench-file", str(bench), "--tune",
                 str(FIXTURES / "tune" / "results-v1.jsonl"), "--json", env=nvml_env("nvml_two_gpus.json"))
    assert result.code == 0, result.stderr
    html = page.read_text()
    assert sections_of(html) == [*SECTIONS, "tune"] and "reaches-chart" in charts_of(html)
    assert external_references(html) == []
    assert not list(tmp_path.glob("*.tmp*")), "written atomically, nothing left behind"


def test_a_page_to_a_missing_folder_is_one_error_and_a_hint(cli, tmp_path: Path) -> None:
    result = cli("report", "--html", str(tmp_path / "no" / "such" / "report.html"))
    assert result.code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error:") and lines[1].startswith("hint:") and len(lines) == 2


def test_a_saved_profile_gets_its_section_and_chart() -> None:
    profiled = {"command": "python train.py", "measured_steps": 20, "median_step_s": 0.125,
                "breakdown": {"data wait": 0.4, "forward": 0.25, "backward": 0.35},
                "findings": [{"title": "The loop waits for its input", "seen": "40% of step time",
                              "change": "DataLoader(num_workers=4)", "weight": 0.4, "explains": 0.4}]}
    report = compose(two_gpus(), scenario("healthy_gpu"), frameworks_imported=False, profile=profiled)
    page = render_html(report, "now")
    assert sections_of(page) == [*SECTIONS, "profile"]
    assert "profile-chart" in charts_of(page) and "median step 125.0 ms" in page
    assert "The loop waits for its input" in page and "up to 1.67x" in page


def test_a_tune_run_that_named_no_winner_is_said_so_in_the_report_not_an_error(tmp_path: Path) -> None:
    from gpufly.report.build import tune_summary
    from gpufly.tune import GreedyPlan, ResultsLog, Search
    from tests.tune.fakes import FakeMachine

    results = tmp_path / "noisy.jsonl"
    Search(GreedyPlan({"fast": [True]}), ResultsLog(results), FakeMachine({"fast": 1.25}, noise=0.3)).run()
    summary = tune_summary(results)
    assert summary.verdict == "too noisy" and summary.speedup is None and summary.code == ()
    assert "varied" in summary.reason


def test_a_confirmed_winner_comes_with_its_interval(tmp_path: Path) -> None:
    from gpufly.report.build import tune_summary
    from gpufly.tune import GreedyPlan, ResultsLog, Search
    from tests.tune.fakes import FakeMachine

    results = tmp_path / "clear.jsonl"
    Search(GreedyPlan({"fast": [True]}), ResultsLog(results), FakeMachine({"fast": 1.25}, noise=0.02)).run()
    summary = tune_summary(results)
    assert summary.verdict == "faster" and summary.speedup is not None
    assert summary.speedup_low is not None and summary.speedup_high is not None
    assert summary.speedup_low <= summary.speedup <= summary.speedup_high
