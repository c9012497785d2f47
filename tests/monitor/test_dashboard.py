"""The web dashboard in a real browser (Debian's headless Chromium): charts drawn from replayed data."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from .serving import require_program, serving


def _chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=8000"]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120)


def test_dashboard_draws_charts_from_replayed_history_and_lists_processes(tmp_path: Path) -> None:
    chromium = require_program("chromium")
    with serving(interval=0.05) as served:
        time.sleep(0.8)  # some history to draw
        dom = _chromium(chromium, tmp_path / "profile", "--dump-dom", served.url)
        shot = tmp_path / "dashboard.png"
        _chromium(chromium, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1400,1800", served.url)
    html = dom.stdout
    assert 'data-ready="1"' in html, dom.stderr[-2000:]
    assert 'data-gpus="2"' in html
    cards = re.findall(r'<div class="card gpu[^"]*" data-gpu="(\d)"', html)
    assert cards == ["0", "1"]
    points = [int(n) for n in re.findall(r'<path class="line" d="M[^"]+" data-points="(\d+)"', html)]
    assert len(points) >= 4 and min(points) >= 5, "the H100's charts are lines through the replayed samples"
    assert "NVIDIA H100 80GB HBM3" in html and "NVIDIA A100-SXM4-80GB" in html
    assert "N/A on this GPU" in html, "the MIG A100 has no utilization; its chart says so"
    pids = re.findall(r'<tr data-pid="(\d+)"', html)
    assert set(pids) >= {"4242", "5150", "7001"}
    assert "train.py" not in html, "command lines stay hidden without --show-cmdline"
    assert shot.exists() and shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
