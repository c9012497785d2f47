"""The report's page in a real browser (Debian's headless Chromium), offline: every section and chart renders, and
the page asks the network for nothing. Chromium's own background requests (updates, accounts) are told apart from
the page's by the network isolation key of the page's origin (file://)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpufly.report import SECTIONS, compose, fleet_section, render_html
from tests.fleet.builders import result, run, write_fleet

from .machines import h100_bench, scenario, two_gpus

OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9"]
"""No name resolves and every request goes to a closed port (9, discard): a page that needed the network would
render without it, and the net log would show the attempt."""


def require_chromium() -> str:
    """Chromium's path; without it, skip here but fail in CI (where .ci/run installs it)."""
    path = shutil.which("chromium")
    if path:
        return path
    reason = "needs Debian's `chromium` package (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must install it (.ci/run does)")
    pytest.skip(reason)


def render_offline(page: Path, workdir: Path, *args: str) -> tuple[str, list[str]]:
    """The DOM Chromium builds from ``page`` offline, and the URLs the page itself asked for."""
    netlog = workdir / "netlog.json"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={workdir / 'profile'}",
             f"--log-net-log={netlog}", "--virtual-time-budget=3000", *OFFLINE, *args]
    done = subprocess.run([require_chromium(), *flags, "--dump-dom", page.as_uri()], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, page_requests(json.loads(netlog.read_text()))


def page_requests(netlog: dict) -> list[str]:
    """Every non-file URL requested on behalf of a file:// page."""
    urls = []
    for event in netlog.get("events", []):
        params = event.get("params", {})
        url, key = params.get("url", ""), params.get("network_isolation_key", "")
        if "method" in params and key.startswith("file://") and not url.startswith("file:"):
            urls.append(url)
    return urls


def test_the_page_renders_every_section_and_chart_offline_and_fetches_nothing(tmp_path: Path) -> None:
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False, bench=h100_bench(),
                     bench_source="bench.json")
    page = tmp_path / "report.html"
    page.write_text(render_html(report, "2026-01-01T00:00:00+00:00"))
    dom, requested = render_offline(page, tmp_path)
    assert requested == []
    assert re.findall(r'<section id="([a-z]+)" data-section="\1"', dom) == list(SECTIONS)
    charts = dict(re.findall(r'<svg class="chart" id="([^"]+)"[^>]*data-bars="(\d+)"', dom))
    assert {"ladder-rate-h100-sxm", "ladder-bandwidth-h100-sxm", "ladder-vram-h100-sxm", "reaches-chart",
            "fits-infer-h100-sxm", "fits-train-a100-80gb-sxm"} <= set(charts)
    for chart_id, bars in charts.items():
        drawn = re.search(rf'<svg class="chart" id="{chart_id}".*?</svg>', dom, re.S)
        assert drawn and drawn.group(0).count('<rect class="bar"') == int(bars) > 0, chart_id
    assert "What to do next" in dom and "H100 SXM: #" in dom


def test_the_fleet_section_and_its_charts_render_offline(tmp_path: Path) -> None:
    def slow_gpu(name, node_facts, runs):
        return node_facts, [runs[0], run(1, [result("gemm.bf16", scale=0.8)])]
    write_fleet(tmp_path / "fleet", nodes=3, change={"node02": slow_gpu})
    report = compose(two_gpus(), scenario("cpu_wheel_on_gpu"), frameworks_imported=False,
                     fleet=fleet_section(tmp_path / "fleet"))
    page = tmp_path / "report.html"
    page.write_text(render_html(report, "2026-01-01T00:00:00+00:00"))

    dom, requested = render_offline(page, tmp_path)

    assert requested == []
    assert re.findall(r'<section id="([a-z]+)" data-section="\1"', dom) == [*SECTIONS, "fleet"]
    fleet = re.search(r'<section id="fleet".*?</section>', dom, re.S)
    assert fleet is not None and "node02 GPU 1 (NVIDIA H100 80GB HBM3): gemm.bf16" in fleet.group(0)
    charts = dict(re.findall(r'<svg class="chart" id="(fleet-[^"]+)"[^>]*data-bars="(\d+)"', fleet.group(0)))
    assert charts["fleet-0-gemm-bf16"] == "6"
    for chart_id, bars in charts.items():
        drawn = re.search(rf'<svg class="chart" id="{chart_id}".*?</svg>', dom, re.S)
        assert drawn and drawn.group(0).count('<rect class="bar"') == int(bars) > 0, chart_id


@pytest.mark.slow
def test_the_check_sees_a_page_that_would_fetch(tmp_path: Path) -> None:
    page = tmp_path / "fetching.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/chart.png">'
                    '<link rel="stylesheet" href="https://cdn.example.invalid/style.css"></body></html>')
    _, requested = render_offline(page, tmp_path)
    assert set(requested) == {"http://example.invalid/chart.png", "https://cdn.example.invalid/style.css"}
