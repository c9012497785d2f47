"""`gpufly report --fleet DIR`: the fleet report's findings on the page, in the terminal and under `fleet` in the
JSON, and each GPU's ceiling charted against its identical siblings' median."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpufly.fleet import build_report, read_fleet
from gpufly.report import compose, fleet_section, render_html
from tests.fleet.builders import facts, result, run, write_fleet

from .machines import scenario, two_gpus


def slow_second_gpu(name, node_facts, runs):
    """GPU 1 of the node reaches 80% of its siblings' GEMM rate while its clocks slow down."""
    slow = run(1, [result("gemm.bf16", scale=0.8, conditions={"clocks_event_reasons": ["hw_slowdown"]})])
    return node_facts, [runs[0], slow]


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    """Four nodes of two H100s: node02's GPU 1 is slow and node03 runs an older driver."""
    folder = tmp_path / "fleet"
    write_fleet(folder, change={"node02": slow_second_gpu,
                                "node03": lambda name, f, runs: (facts(driver="535.104.05"), runs)})
    return folder


def test_the_section_carries_the_fleet_reports_findings(fleet_dir: Path) -> None:
    section = fleet_section(fleet_dir)

    assert section.report == build_report(read_fleet([fleet_dir]))
    assert [(f.kind, f.node) for f in section.report.findings] == [("setup", "node03"), ("slow-gpu", "node02")]


def test_each_gpu_is_charted_against_its_siblings_median(fleet_dir: Path) -> None:
    charts = {chart.benchmark: chart for chart in fleet_section(fleet_dir).charts}

    gemm = charts["gemm.bf16"]
    assert gemm.gpu_model == "NVIDIA H100 80GB HBM3" and gemm.shape == "n=8192"
    slowest, *rest = gemm.bars
    assert (slowest.label, slowest.slow, round(slowest.percent)) == ("node02 GPU 1", True, 80)
    assert slowest.measured == "600.0 TFLOP/s" and slowest.median == "750.0 TFLOP/s"
    assert len(rest) == 7 and all(not bar.slow and round(bar.percent) == 100 for bar in rest)
    assert len(charts["memory.copy"].bars) == 7, "node02 GPU 1 measured only GEMM"


def test_a_latency_is_inverted_so_a_short_bar_is_the_slower_gpu(tmp_path: Path) -> None:
    def slow_launch(name, node_facts, runs):
        return node_facts, [runs[0], run(1, [result("launch.empty", scale=0.5, interval=0.02)])]
    write_fleet(tmp_path, nodes=2, change={"node02": slow_launch})

    [launch] = [c for c in fleet_section(tmp_path).charts if c.benchmark == "launch.empty"]

    slowest = launch.bars[0]
    assert slowest.label == "node02 GPU 1" and round(slowest.percent) == 50 and slowest.slow
    assert slowest.low is not None and slowest.high is not None and slowest.low < 50 < slowest.high


def test_the_page_has_a_fleet_section_with_its_findings_and_charts(fleet_dir: Path) -> None:
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False,
                     fleet=fleet_section(fleet_dir))

    page = render_html(report, "2026-01-01T00:00:00+00:00")

    section = re.search(r'<section id="fleet" data-section="fleet">.*?</section>', page, re.S)
    assert section is not None and '<a href="#fleet">Fleet</a>' in page
    assert "node03: driver 535.104.05" in section.group(0) and "hw_slowdown" in section.group(0)
    charts = re.findall(r'<svg class="chart" id="(fleet-[^"]+)"[^>]*data-bars="(\d+)"', section.group(0))
    assert ("fleet-0-gemm-bf16", "8") in charts and len(charts) == 4
    assert 'stroke="#000000"' in section.group(0), "the slow GPU's bar is outlined"


def test_a_uniform_fleet_says_so(tmp_path: Path) -> None:
    write_fleet(tmp_path, nodes=2, gpus=1)
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False,
                     fleet=fleet_section(tmp_path))

    page = render_html(report, "2026-01-01T00:00:00+00:00")

    assert "uniform: no node or GPU differs from the rest" in page
    assert report.to_dict()["fleet"]["uniform"] is True


def test_without_fleet_the_json_says_none() -> None:
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False)

    assert report.to_dict()["fleet"] is None
    assert 'id="fleet"' not in render_html(report, "2026-01-01T00:00:00+00:00")


def test_report_fleet_json_carries_the_fleet_report(cli, fleet_dir: Path) -> None:
    done = cli("report", "--fleet", str(fleet_dir), "--json")

    assert done.code == 0, done.stderr
    fleet = json.loads(done.stdout)["fleet"]
    assert fleet["source"] == str(fleet_dir) and fleet["compared"] == 29
    assert [(f["kind"], f["subject"], f["node"]) for f in fleet["findings"]] == [
        ("setup", "driver", "node03"), ("slow-gpu", "gemm.bf16", "node02")]
    assert fleet["ceilings"][0]["bars"][0]["label"] == "node02 GPU 1"


def test_report_fleet_prints_the_fleet_report_in_the_terminal(cli, fleet_dir: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"

    done = cli("report", "--fleet", str(fleet_dir), "--html", str(page))

    assert done.code == 0, done.stderr
    assert "gpufly fleet: 4 nodes; 29 GPU bench figures compared" in done.stdout
    assert "[slow-gpu] node02 GPU 1" in done.stdout and "why: clock events during the run: hw_slowdown" in done.stdout
    assert 'id="fleet-0-gemm-bf16"' in page.read_text()


def test_report_fleet_on_a_missing_folder_is_one_error(cli, tmp_path: Path) -> None:
    done = cli("report", "--fleet", str(tmp_path / "nowhere"))

    assert done.code == 2
    assert done.stderr.count("error:") == 1 and done.stderr.count("hint:") == 1
