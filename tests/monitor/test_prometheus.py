"""A real Prometheus server (Debian's package) scrapes `gpufly serve --replay` and answers queries for it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .serving import require_program, serving


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _query(base: str, expression: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=10) as reply:
        answer = json.loads(reply.read())
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def test_prometheus_scrapes_serve_and_returns_dcgm_gpu_util(tmp_path: Path) -> None:
    prometheus = require_program("prometheus")
    with serving(interval=0.1) as served:
        target = urllib.parse.urlsplit(served.url).netloc
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gpufly\n    scrape_interval: 1s\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            result: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not result:
                time.sleep(0.5)
                try:
                    result = _query(base, 'DCGM_FI_DEV_GPU_UTIL{job="gpufly"}')
                except OSError:
                    continue  # Prometheus still starting
            assert result, "Prometheus never returned DCGM_FI_DEV_GPU_UTIL"
            up = _query(base, 'up{job="gpufly"}')
            mig = _query(base, 'DCGM_FI_DEV_FB_USED{GPU_I_PROFILE="3g.40gb"}')
            energy = _query(base, "gpufly_gpu_energy_joules_total")
        finally:
            server.terminate()
            log, _ = server.communicate(timeout=30)
    series = result[0]
    assert series["metric"]["modelName"] == "NVIDIA H100 80GB HBM3"
    assert series["metric"]["gpu"] == "0" and series["metric"]["Hostname"] == "gpu-node-1"
    assert 0 <= float(series["value"][1]) <= 100
    assert [float(s["value"][1]) for s in up] == [1.0], log[-2000:]
    assert {s["metric"]["GPU_I_ID"] for s in mig} == {"1", "2"}
    assert energy and all(float(s["value"][1]) >= 0 for s in energy)
