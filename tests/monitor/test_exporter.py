"""The Prometheus collector on its own: DCGM names and labels, None left out, lost GPUs, and the Grafana JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufly.hw import GpuSample, HostSample, XidEvent
from gpufly.monitor.backends.replay import ReplayBackend
from gpufly.monitor.exporter import GPU_LABELS, exporter_registry
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import History

RECORDING = Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl"
DASHBOARD = Path(__file__).parent.parent.parent / "grafana" / "gpufly-dashboard.json"


def _scrape(history: History) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(exporter_registry(history, "replay")).decode()
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _replayed(samples: int) -> History:
    history = History()
    replay = ReplayBackend(RECORDING, loop=False)
    for _ in range(samples):
        history.add(replay.snapshot())
    return history


def test_unsupported_fields_are_left_out_never_written_as_zero() -> None:
    gpu = GpuSample(index=0, name="Tesla T4", uuid="GPU-1", pci_bus_id="00000000:01:00.0", power_w=None,
                    temperature_c=41.0, fan_percent=None, utilization_gpu_percent=7.0)
    history = History()
    history.add(Snapshot(time=1.0, hostname="node", gpus=[gpu], host=HostSample(cpu_percent=3.0)))
    samples = _scrape(history)
    assert samples["DCGM_FI_DEV_GPU_TEMP"] == [({"gpu": "0", "UUID": "GPU-1", "pci_bus_id": "00000000:01:00.0",
                                                 "device": "nvidia0", "modelName": "Tesla T4", "Hostname": "node",
                                                 "DCGM_FI_DRIVER_VERSION": ""}, 41.0)]
    assert "DCGM_FI_DEV_POWER_USAGE" not in samples and "DCGM_FI_DEV_FAN_SPEED" not in samples
    assert samples["gpufly_host_cpu_percent"] == [({"Hostname": "node"}, 3.0)]


def test_a_lost_gpu_is_flagged_and_its_stale_figures_are_gone() -> None:
    history = _replayed(120)  # the recording ends with the H100 lost
    latest = history.latest
    assert latest is not None and latest.gpus[0].lost
    samples = _scrape(history)
    lost = {labels["gpu"]: value for labels, value in samples["gpufly_gpu_lost"]}
    assert lost == {"0": 1.0, "1": 0.0}
    assert all(labels["gpu"] == "1" for labels, _ in samples["DCGM_FI_DEV_FB_USED"])
    assert all(set(labels) >= set(GPU_LABELS) for labels, _ in samples["DCGM_FI_DEV_FB_USED"])


def test_units_convert_to_dcgm_mib_and_millijoules_and_to_base_units() -> None:
    history = _replayed(30)
    samples = _scrape(history)
    gpu = next(g for g in history.latest.gpus if g.index == 0)  # type: ignore[union-attr]
    by_gpu = {name: {lab["gpu"]: v for lab, v in rows if "GPU_I_ID" not in lab} for name, rows in samples.items()
              if rows and "gpu" in rows[0][0]}
    assert by_gpu["DCGM_FI_DEV_FB_USED"]["0"] == gpu.memory_used_bytes / 1024**2
    assert by_gpu["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]["0"] == gpu.energy_j * 1000  # type: ignore[operator]
    assert by_gpu["gpufly_gpu_sm_clock_hertz"]["0"] == gpu.sm_clock_mhz * 1e6  # type: ignore[operator]
    assert by_gpu["gpufly_gpu_energy_joules_total"]["0"] == history.energy_since_start_j(0)
    assert samples["gpufly_exporter_samples_total"] == [({}, 30.0)]


def test_every_metric_in_the_grafana_dashboard_is_one_gpufly_serves() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    expressions += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for expr in expressions for name in re.findall(r"\b((?:DCGM_FI|gpufly)_[A-Za-z0-9_]+)", expr)}
    served = set(_scrape(_replayed(40))) | set(_scrape(_with_an_xid()))
    assert used, "the dashboard queries something"
    assert used <= served, f"the dashboard asks for series gpufly does not serve: {sorted(used - served)}"
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"} <= used
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in dashboard["panels"])


def _with_an_xid() -> History:
    """A GPU that had an XID: the series only XIDs bring (their counter) are served."""
    history = History()
    gpu = GpuSample(index=0, name="H100", xid_events=[XidEvent(kind="xid", xid=79, time=1.0, seq=1)])
    history.add(Snapshot(time=1.0, hostname="node", gpus=[gpu]))
    return history


def test_every_emitted_metric_is_documented() -> None:
    docs = (Path(__file__).parent.parent.parent / "docs" / "monitor.md").read_text()
    served = set(_scrape(_replayed(40))) | set(_scrape(_with_an_xid()))
    assert "gpufly_gpu_xid_events_total" in served
    # prometheus_client adds _total and _info suffixes to counters and info metrics; the docs name what is served
    undocumented = sorted(name for name in served if f"`{name}`" not in docs)
    assert not undocumented, f"docs/monitor.md does not list {undocumented}"
