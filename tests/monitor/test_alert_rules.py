"""The Prometheus alert rules and the Grafana health panels: promtool checks and unit-tests the rules (CI installs
it; without CI a machine lacking it skips those two), and their structure is checked here without it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

from gpufly.monitor.health import Level

from .serving import require_program

ROOT = Path(__file__).parent.parent.parent
RULES = ROOT / "deploy" / "prometheus" / "gpufly-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "gpufly-alerts.test.yml"
DASHBOARD = ROOT / "grafana" / "gpufly-dashboard.json"

DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
"""Prometheus' duration syntax."""


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_program("promtool"), *args], capture_output=True, text=True, timeout=120,
                          cwd=RULES.parent)


def test_promtool_accepts_the_rules() -> None:
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 2 rules found" in done.stdout


def test_promtool_fires_the_alerts_on_the_series_gpufly_serves() -> None:
    done = _promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_reads_the_health_verdict_with_a_severity_a_wait_and_words() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert all(set(group) == {"name", "rules"} for group in document["groups"])
    by_name = {rule["alert"]: rule for rule in rules}
    assert set(by_name) == {"GpuflyGpuFailing", "GpuflyGpuDegraded"}
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
        assert "gpufly_gpu_health" in rule["expr"] and "without (reason)" in rule["expr"]
        assert DURATION.match(rule["for"])
        assert rule["labels"]["severity"] in {"critical", "warning"}
        assert {"summary", "description"} <= set(rule["annotations"])
    assert by_name["GpuflyGpuFailing"]["expr"].endswith(f"== {Level.FAILING.value}")
    assert by_name["GpuflyGpuDegraded"]["expr"].endswith(f"== {Level.DEGRADED.value}")


def test_the_dashboard_draws_health_with_the_verdicts_names() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    health = [panel for panel in panels if any("gpufly_gpu_health" in t["expr"] for t in panel["targets"])]
    assert {panel["type"] for panel in health} == {"state-timeline", "table"}
    for panel in health:
        mapping = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
        assert {int(value): shown["text"] for value, shown in mapping.items()} == {
            level.value: level.name for level in Level}
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
