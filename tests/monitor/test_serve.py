"""`gpufly serve` over real HTTP: metric names and labels, 200 concurrent scrapes, read-only, the JSON API."""

from __future__ import annotations

import itertools
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufly.monitor.exporter import GPU_LABELS, MIG_LABELS
from gpufly.monitor.metrics import DCGM_METRICS
from tests.fakes.nvml import nvml_env

from .serving import RECORDING, serving

DCGM_EXPORTER_NAMES = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
                       "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK")
"""Names as DCGM-exporter's default counters file (default-counters.csv) spells them."""
PATIENCE_S = 60.0
"""How long a test polls a server for a count it must reach: a bound for a hung server, not a timing."""


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_metrics_carry_dcgm_names_labels_and_base_unit_gpufly_names() -> None:
    with serving() as served:
        status, content_type, text = served.get("/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = _samples(text)
    for name in DCGM_EXPORTER_NAMES:
        assert name in samples, name
    whole_gpus = [labels for labels, _ in samples["DCGM_FI_DEV_FB_USED"] if "GPU_I_ID" not in labels]
    assert sorted(label["gpu"] for label in whole_gpus) == ["0", "1"]
    # The A100 is in MIG mode, where NVML has no utilization: the series is left out, not written as 0.
    assert [labels["gpu"] for labels, _ in samples["DCGM_FI_DEV_GPU_UTIL"]] == ["0"]
    h100 = next(label for label in whole_gpus if label["gpu"] == "0")
    assert tuple(h100) == GPU_LABELS or set(h100) == set(GPU_LABELS)
    assert h100["modelName"] == "NVIDIA H100 80GB HBM3"
    assert h100["UUID"].startswith("GPU-") and h100["pci_bus_id"] and h100["device"] == "nvidia0"
    assert h100["Hostname"] == "gpu-node-1"
    mig = [labels for labels, _ in samples["DCGM_FI_DEV_FB_USED"] if "GPU_I_ID" in labels]
    assert {m["GPU_I_ID"] for m in mig} == {"1", "2"} and all(set(m) == set(MIG_LABELS) for m in mig)
    assert {m["GPU_I_PROFILE"] for m in mig} == {"3g.40gb"}
    # gpufly's own names are in base units: joules, seconds, bytes, hertz.
    assert "gpufly_gpu_energy_joules_total" in samples
    assert "gpufly_gpu_memory_used_bytes" in samples
    used_mib = {lab["gpu"]: v for lab, v in samples["DCGM_FI_DEV_FB_USED"] if "GPU_I_ID" not in lab}
    used_bytes = {lab["gpu"]: v for lab, v in samples["gpufly_gpu_memory_used_bytes"]}
    assert used_bytes["0"] == pytest.approx(used_mib["0"] * 1024**2, rel=0.01)
    clock_mhz = {lab["gpu"]: v for lab, v in samples["DCGM_FI_DEV_SM_CLOCK"]}
    clock_hz = {lab["gpu"]: v for lab, v in samples["gpufly_gpu_sm_clock_hertz"]}
    assert clock_hz["0"] == pytest.approx(clock_mhz["0"] * 1e6, rel=0.01)
    assert all(metric.exporter.startswith("DCGM_FI_") for metric in DCGM_METRICS)


def test_throttle_seconds_and_energy_grow_while_it_runs() -> None:
    with serving(interval=0.05) as served:
        first = _samples(served.get("/metrics")[2])
        deadline = time.monotonic() + 15
        while True:  # the recording's H100 reaches its power cap about 20 samples in
            later = _samples(served.get("/metrics")[2])
            if later.get("gpufly_gpu_throttle_seconds_total") or time.monotonic() > deadline:
                break
            time.sleep(0.1)

    def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
        return sum(value for _, value in samples.get(name, []))

    assert total(later, "gpufly_gpu_energy_joules_total") > total(first, "gpufly_gpu_energy_joules_total")
    throttled = later.get("gpufly_gpu_throttle_seconds_total", [])
    assert throttled, "the recording's H100 is held back while it runs"
    assert {labels["reason"] for labels, _ in throttled} == {"sw_power_cap"}
    assert all(value > 0 for _, value in throttled)


def test_two_hundred_concurrent_scrapes_are_all_answered() -> None:
    with serving() as served:
        url = served.url + "metrics"

        def scrape(_: int) -> tuple[int, bool]:
            with urllib.request.urlopen(url, timeout=30) as reply:
                return reply.status, b"DCGM_FI_DEV_GPU_UTIL" in reply.read()

        with ThreadPoolExecutor(max_workers=200) as pool:
            results = list(pool.map(scrape, range(200)))
    assert results == [(200, True)] * 200


def test_read_only_and_command_lines_hidden_unless_asked() -> None:
    with serving() as served:
        request = urllib.request.Request(served.url + "metrics", method="POST", data=b"")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(served.url + "kill", timeout=10)
        assert missing.value.code == 404
        view = served.json("/api/snapshot")
    processes = [p for gpu in view["snapshot"]["gpus"] for p in gpu["processes"]]
    assert processes and all(p["cmdline"] is None for p in processes)
    assert view["show_cmdline"] is False
    with serving("--show-cmdline") as served:
        view = served.json("/api/snapshot")
    assert any(p["cmdline"] for gpu in view["snapshot"]["gpus"] for p in gpu["processes"])


def test_history_api_grows_and_dashboard_files_are_served() -> None:
    with serving(interval=0.05) as served:
        history = served.json("/api/history")
        deadline = time.monotonic() + PATIENCE_S
        while len(history["gpus"][0]["series"]["utilization_gpu_percent"]) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
            history = served.json("/api/history")
        page = served.get("/")
        script = served.get("/app.js")
    gpu0 = history["gpus"][0]
    points = gpu0["series"]["utilization_gpu_percent"]
    assert len(points) >= 5
    assert all(later[0] > earlier[0] for earlier, later in itertools.pairwise(points))
    assert page[0] == 200 and page[1].startswith("text/html") and "app.js" in page[2]
    assert script[0] == 200 and "api/history" in script[2]
    assert "http" not in page[2].replace("http-equiv", ""), "the page loads nothing from elsewhere"


def test_port_in_use_is_one_line_with_a_hint(cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), "--replay", str(RECORDING))
    assert done.code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "hint:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "message"), [(["--interval", "0"], "--interval must be positive"),
                                               (["--interval", "inf"], "at most 3600 seconds"),
                                               (["--interval", "nan"], "at most 3600 seconds"),
                                               (["--port", "70000"], "--port must be between 0 and 65535"),
                                               (["--history", "1"], "--history must be at least 2"),
                                               (["--host", ""], "--host is empty"),
                                               (["--allow-host", " "], "--allow-host is empty"),
                                               (["--allow-host", "http://dash.example:9400"],
                                                "--allow-host takes a host name")])
def test_bad_options_are_one_line(cli, args: list[str], message: str) -> None:
    done = cli("serve", *args, env=nvml_env("hw/no_driver.json"))
    assert done.code == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_live_metrics_come_from_the_recorded_machine_through_the_nvml_fixture() -> None:
    with serving(replay=None, env=nvml_env("monitor/nvml_live.json")) as served:
        samples = _samples(served.get("/metrics")[2])
    assert served.info["gpus"] == 2
    power = {labels["gpu"]: value for labels, value in samples["DCGM_FI_DEV_POWER_USAGE"]}
    assert power == {"0": pytest.approx(698.5), "1": pytest.approx(92.0)}
    assert [labels["gpu"] for labels, _ in samples["DCGM_FI_DEV_GPU_UTIL"]] == ["0"], "none in MIG mode, not 0"


def test_without_a_gpu_it_says_so_in_one_line_and_serves_the_host() -> None:
    with serving(replay=None, env=nvml_env("hw/no_driver.json")) as served:
        samples = _samples(served.get("/metrics")[2])
    err = served.process.stderr.read() if served.process.stderr else ""
    assert "gpufly_host_memory_total_bytes" in samples
    assert "DCGM_FI_DEV_GPU_UTIL" not in samples
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("no NVIDIA GPU to monitor on "), err
    assert served.info["gpus"] == 0
