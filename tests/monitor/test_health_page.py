"""The health verdict on `serve`'s web page and in /api/snapshot: a replayed GPU held in thermal slowdown."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from .serving import RECORDING, require_program, serving


def _thermal_recording(tmp_path: Path) -> Path:
    """The first 20 samples of the two-GPU recording with the H100 in HW thermal slowdown throughout."""
    lines = []
    for line in RECORDING.read_text().splitlines()[:20]:
        data = json.loads(line)
        data["gpus"][0]["throttle_reasons"] = ["sw_power_cap", "hw_thermal_slowdown"]
        lines.append(json.dumps(data))
    path = tmp_path / "thermal.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_snapshot_api_carries_each_gpus_verdict(tmp_path: Path) -> None:
    with serving(replay=_thermal_recording(tmp_path), interval=0.05) as served:
        gpus = served.json("/api/snapshot")["gpus"]
    assert gpus["0"]["health"]["code"] == "hw_thermal_slowdown" and gpus["0"]["health"]["level"] == "DEGRADED"
    assert gpus["1"]["health"]["level"] == "HEALTHY"


@pytest.mark.slow
def test_the_page_shows_the_verdict_and_its_reasons(tmp_path: Path) -> None:
    chromium = require_program("chromium")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
             "--virtual-time-budget=8000", "--dump-dom"]
    with serving(replay=_thermal_recording(tmp_path), interval=0.05) as served:
        deadline = time.monotonic() + 60
        while served.json("/api/history")["gpus"] == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        html = subprocess.run([chromium, *flags, served.url], capture_output=True, text=True, timeout=120).stdout
    assert re.findall(r'data-health="(\w+)"', html) == ["DEGRADED", "HEALTHY"]
    assert '<li data-reason="hw_thermal_slowdown">HW thermal slowdown active (the GPU is too hot)</li>' in html
