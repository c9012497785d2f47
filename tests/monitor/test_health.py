"""The health verdict per GPU: each rule from a recorded machine whose answers are changed the way a fault changes
them, then the same verdict in `top`, `watch` records, the exporter and the JSON the web page reads."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpufly.hw import FIXTURE_ENV, GpuSample
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.monitor import History, Snapshot
from gpufly.monitor.backends.live import LiveBackend
from gpufly.monitor.backends.replay import ReplayBackend, read_recording
from gpufly.monitor.exporter import exporter_registry
from gpufly.monitor.health import CODES, RULES, SUSTAINED_SAMPLES, Health, HealthWatch, Level, assess
from gpufly.monitor.logger import SampleLog
from gpufly.monitor.views import gpu_lines, once_json, once_lines
from tests.fakes.nvml import FIXTURES, fake_nvml
from tests.monitor.logs import write_jsonl_and_csv

RECORDING = Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl"
DOCS = Path(__file__).parent.parent.parent / "docs" / "monitor.md"

HW_THERMAL, SW_POWER_CAP, HW_SLOWDOWN = 0x40, 0x4, 0x8


@pytest.fixture
def fake() -> FakePynvml:
    """The recorded H100 (busy at its power cap) and MIG A100 (idle, 3 corrected ECC errors)."""
    return fake_nvml("monitor/nvml_live.json")


def _h100(fake: FakePynvml) -> GpuSample:
    return LiveBackend(fake).snapshot().gpus[0]


def test_a_busy_gpu_at_its_power_cap_is_healthy_and_what_could_not_be_checked_is_said(fake: FakePynvml) -> None:
    h100, a100 = LiveBackend(fake).snapshot().gpus
    assert h100.slowdown_reasons == ["sw_power_cap"] and h100.utilization_gpu_percent == 97
    verdict = assess([h100])
    assert verdict.level is Level.HEALTHY and verdict.code == "none" and verdict.text() == "HEALTHY"
    assert {f"hw_slowdown: needs {SUSTAINED_SAMPLES} samples, has 1",
            f"clocks_stuck_low: needs {SUSTAINED_SAMPLES} samples, has 1"} <= set(verdict.unchecked)
    idle_mig = assess([a100])
    assert idle_mig.level is Level.HEALTHY, "3 corrected ECC errors are corrected"
    assert "clocks_stuck_low: utilization_gpu_percent not reported" in idle_mig.unchecked


def test_uncorrected_ecc_errors_fail_the_gpu(fake: FakePynvml) -> None:
    fake.device_data(0)["ecc_volatile"] = {"corrected": 0, "uncorrected": 2}
    verdict = assess([_h100(fake)])
    assert verdict.level is Level.FAILING and verdict.code == "ecc_uncorrected"
    assert verdict.text() == "FAILING: 2 uncorrected ECC errors since the driver loaded"


def test_a_card_without_ecc_has_the_ecc_rule_unchecked_not_passed() -> None:
    geforce = LiveBackend(FakePynvml.node(1)).snapshot().gpus[0]
    assert "ecc_uncorrected: ecc_uncorrected_volatile not reported" in assess([geforce]).unchecked


def test_a_lost_gpu_fails_with_why_and_the_other_is_still_judged(fake: FakePynvml) -> None:
    fake.lose(0)
    h100, a100 = LiveBackend(fake).snapshot().gpus
    lost = assess([h100])
    assert lost.level is Level.FAILING and lost.code == "gpu_lost"
    assert lost.text() == "FAILING: GPU lost: fallen off the bus (NVML_ERROR_GPU_IS_LOST)"
    assert assess([a100]).level is Level.HEALTHY


@pytest.mark.parametrize(("mask", "code"), [(HW_THERMAL, "hw_thermal_slowdown"), (0x20, "sw_thermal_slowdown"),
                                            (0x80, "hw_power_brake")])
def test_thermal_and_power_brake_slowdowns_degrade_on_the_sample_they_appear(fake: FakePynvml, mask: int,
                                                                             code: str) -> None:
    fake.device_data(0)["clocks_event_reasons"] = mask | SW_POWER_CAP
    verdict = assess([_h100(fake)])
    assert verdict.level is Level.DEGRADED and [r.code for r in verdict.reasons] == [code]


def test_hw_slowdown_counts_only_when_it_lasts(fake: FakePynvml) -> None:
    """NVML also reports HW slowdown for a moment during a P-state or clock change."""
    watch, backend = HealthWatch(), LiveBackend(fake)
    fake.device_data(0)["clocks_event_reasons"] = HW_SLOWDOWN
    levels = [watch.update(backend.snapshot())[0].level for _ in range(SUSTAINED_SAMPLES)]
    assert levels == [Level.HEALTHY] * (SUSTAINED_SAMPLES - 1) + [Level.DEGRADED]
    unseen = backend.snapshot().gpus[0]
    assert watch.verdict(unseen).code == "hw_slowdown", "a sample not seen yet is judged after those seen"
    fake.device_data(0)["clocks_event_reasons"] = 0
    assert watch.update(backend.snapshot())[0].level is Level.HEALTHY
    assert assess([unseen]).code == "none", "alone, one sample cannot show it lasts"


def test_clocks_stuck_low_under_load_degrade_once_sustained_and_name_what_nvml_says(fake: FakePynvml) -> None:
    watch, backend = HealthWatch(), LiveBackend(fake)
    fake.device_data(0)["clocks_mhz"] = {"sm": 690, "mem": 2619}
    verdicts = [watch.update(backend.snapshot())[0] for _ in range(SUSTAINED_SAMPLES)]
    assert [v.level for v in verdicts] == [Level.HEALTHY] * (SUSTAINED_SAMPLES - 1) + [Level.DEGRADED]
    assert verdicts[-1].reasons[0].detail == (f"SM clock 690 of 1980 MHz (35%) at 97% utilization for "
                                              f"{SUSTAINED_SAMPLES} samples (active: power cap)")
    fake.device_data(0)["utilization"] = [4, 1]
    assert watch.update(backend.snapshot())[0].level is Level.HEALTHY, "an idle GPU drops its clocks on purpose"


def test_memory_over_95_percent_is_nearly_full(fake: FakePynvml) -> None:
    total = fake.device_data(0)["memory_total"]
    fake.device_data(0)["memory_used"] = int(total * 0.95)
    assert assess([_h100(fake)]).level is Level.HEALTHY
    fake.device_data(0)["memory_used"] = int(total * 0.97)
    assert assess([_h100(fake)]).text() == "DEGRADED: memory 97% full (77.3 GiB of 79.6 GiB)"


def test_reasons_come_most_severe_first_and_the_code_is_the_worst(fake: FakePynvml) -> None:
    fake.device_data(0)["memory_used"] = fake.device_data(0)["memory_total"] - 2**20
    fake.device_data(0)["clocks_event_reasons"] = HW_THERMAL
    fake.device_data(0)["ecc_volatile"] = {"corrected": 0, "uncorrected": 1}
    verdict = assess([_h100(fake)])
    assert [r.code for r in verdict.reasons] == ["ecc_uncorrected", "hw_thermal_slowdown", "memory_nearly_full"]
    assert verdict.code == "ecc_uncorrected" and verdict.level is Level.FAILING
    assert verdict.to_dict()["reasons"][1] == {"code": "hw_thermal_slowdown", "level": "DEGRADED",
                                               "detail": "HW thermal slowdown active (the GPU is too hot)"}


def test_a_swapped_card_starts_a_fresh_window(fake: FakePynvml) -> None:
    watch, backend = HealthWatch(), LiveBackend(fake)
    fake.device_data(0)["clocks_mhz"] = {"sm": 690, "mem": 2619}
    for _ in range(SUSTAINED_SAMPLES - 1):
        watch.update(backend.snapshot())
    swapped = backend.snapshot()
    swapped.gpus[0].uuid = "GPU-another-card"
    assert watch.update(swapped)[0].level is Level.HEALTHY


def test_every_code_is_documented_with_its_level() -> None:
    docs = DOCS.read_text()
    for rule in RULES:
        assert f"| `{rule.code}` | {rule.level.name}" in docs, "the worst level it gives comes first"
    assert "| `gpu_lost` | FAILING |" in docs
    assert set(CODES) == {"none", "gpu_lost", *(rule.code for rule in RULES)}


# --- where the verdict is shown


def _scrape(history: History, health: HealthWatch | None = None) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(exporter_registry(history, "replay", health=health)).decode()
    return [(sample.labels, sample.value) for family in text_string_to_metric_families(text)
            for sample in family.samples if sample.name == "gpufly_gpu_health"]


def test_the_exporter_serves_one_health_series_per_gpu_with_the_worst_reason(fake: FakePynvml) -> None:
    fake.device_data(0)["clocks_event_reasons"] = HW_THERMAL
    fake.device_data(1)["ecc_volatile"] = {"corrected": 3, "uncorrected": 1}
    history = History()
    history.add(LiveBackend(fake).snapshot())
    series = _scrape(history)
    assert [(labels["gpu"], labels["reason"], value) for labels, value in series] == [
        ("0", "hw_thermal_slowdown", 1.0), ("1", "ecc_uncorrected", 2.0)]
    assert series[0][0]["UUID"] == "GPU-6f1c2a3e-8d55-4b1e-9f0a-2b7c41d0e911"


def test_the_exporter_reads_the_watch_that_saw_every_sample(fake: FakePynvml) -> None:
    """Held low clocks need several samples: the exporter alone sees one, the sampler's HealthWatch all."""
    fake.device_data(0)["clocks_mhz"] = {"sm": 690, "mem": 2619}
    history, watch, backend = History(), HealthWatch(), LiveBackend(fake)
    for _ in range(SUSTAINED_SAMPLES):
        snapshot = backend.snapshot()
        history.add(snapshot)
        watch.update(snapshot)
    assert _scrape(history)[0][0]["reason"] == "none"
    assert [(labels["reason"], value) for labels, value in _scrape(history, watch)] == [
        ("clocks_stuck_low", 1.0), ("none", 0.0)]


def test_a_replayed_run_ending_with_a_lost_gpu_keeps_its_reason_labels_bounded() -> None:
    history, watch = History(), HealthWatch()
    reasons = set()
    for snapshot in ReplayBackend(RECORDING, loop=False):
        history.add(snapshot)
        watch.update(snapshot)
        series = _scrape(history, watch)
        assert len(series) == len(snapshot.gpus), "one series per GPU at any moment"
        reasons |= {labels["reason"] for labels, _ in series}
    assert reasons <= set(CODES)
    assert {labels["gpu"]: (labels["reason"], value) for labels, value in _scrape(history, watch)} == {
        "0": ("gpu_lost", 2.0), "1": ("none", 0.0)}


def test_watch_records_carry_the_verdict_in_jsonl_and_csv_and_replay_still_reads_them(tmp_path: Path) -> None:
    snapshots = list(ReplayBackend(RECORDING, loop=False))
    write_jsonl_and_csv(snapshots, tmp_path)
    last = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[-1])
    assert [gpu["health"]["code"] for gpu in last["gpus"]] == ["gpu_lost", "none"]
    assert last["gpus"][0]["health"]["level"] == "FAILING"
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run.csv").read_text())))
    assert [(row["gpu_index"], row["gpu_health"], row["gpu_health_reasons"]) for row in rows[-2:]] == [
        ("0", "FAILING", "gpu_lost"), ("1", "HEALTHY", "")]
    for suffix in (".jsonl", ".csv"):
        replayed, skipped = read_recording(tmp_path / f"run{suffix}")
        assert skipped == 0 and len(replayed) == len(snapshots)


def test_watch_writes_what_the_window_saw(tmp_path: Path, fake: FakePynvml) -> None:
    fake.device_data(0)["clocks_event_reasons"] = HW_SLOWDOWN
    log, backend = SampleLog(tmp_path / "run.jsonl"), LiveBackend(fake)
    for _ in range(SUSTAINED_SAMPLES):
        log.write(backend.snapshot())
    log.close()
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    codes = [json.loads(line)["gpus"][0]["health"]["code"] for line in lines]
    assert codes == ["none"] * (SUSTAINED_SAMPLES - 1) + ["hw_slowdown"]


def test_top_panel_names_the_verdict_and_its_reasons(fake: FakePynvml) -> None:
    fake.device_data(0)["clocks_event_reasons"] = HW_THERMAL | SW_POWER_CAP
    h100 = _h100(fake)
    lines = gpu_lines(h100)
    assert lines[0] == "GPU 0  NVIDIA H100 80GB HBM3  DEGRADED  slowdown: power cap, thermal (HW)"
    assert "health: DEGRADED: HW thermal slowdown active (the GPU is too hot)" in lines
    healthy = gpu_lines(h100, health=Health())
    assert "HEALTHY" in healthy[0] and not any(line.startswith("health:") for line in healthy)


def test_top_once_and_its_json_carry_the_verdict(fake: FakePynvml) -> None:
    fake.device_data(1)["ecc_volatile"] = {"corrected": 3, "uncorrected": 4}
    snapshot = LiveBackend(fake).snapshot()
    h100_line, a100_line = once_lines(snapshot)[1:3]
    assert h100_line.endswith("| health: HEALTHY")
    assert "| health: FAILING: 4 uncorrected ECC errors since the driver loaded" in a100_line
    data = once_json(snapshot)
    assert [gpu["health"]["level"] for gpu in data["gpus"]] == ["HEALTHY", "FAILING"]


def test_top_once_from_the_cli_says_a_failing_gpu(cli, tmp_path: Path) -> None:
    fixture = json.loads((FIXTURES / "monitor" / "nvml_live.json").read_text())
    fixture["devices"][0]["ecc_volatile"] = {"corrected": 0, "uncorrected": 1}
    path = tmp_path / "ecc.json"
    path.write_text(json.dumps(fixture))
    done = cli("top", "--once", env={FIXTURE_ENV: str(path)})
    assert done.code == 0, done.stderr
    assert "health: FAILING: 1 uncorrected ECC errors since the driver loaded" in done.stdout


def test_a_snapshot_without_gpus_has_no_verdicts() -> None:
    assert HealthWatch().update(Snapshot(time=1.0)) == {}


def test_a_busy_gpu_on_a_narrower_or_slower_link_than_its_maximum_is_degraded_once_it_lasts(
        fake: FakePynvml) -> None:
    fake.device_data(0)["pcie"] = {"gen_current": 5, "gen_max": 5, "width_current": 8, "width_max": 16}
    watch, backend = HealthWatch(), LiveBackend(fake)
    verdicts = [watch.update(backend.snapshot())[0] for _ in range(SUSTAINED_SAMPLES)]
    assert [v.code for v in verdicts] == ["none"] * (SUSTAINED_SAMPLES - 1) + ["pcie_link_degraded"]
    assert verdicts[-1].reasons[0].detail == f"PCIe link Gen5 x8 of Gen5 x16 while busy for {SUSTAINED_SAMPLES} samples"


def test_an_idle_gpu_on_a_downshifted_link_is_healthy(fake: FakePynvml) -> None:
    """NVIDIA lowers an idle GPU's link generation to save power."""
    fake.device_data(0)["pcie"] = {"gen_current": 1, "gen_max": 5, "width_current": 16, "width_max": 16}
    fake.device_data(0)["utilization"] = [0, 0]
    watch, backend = HealthWatch(), LiveBackend(fake)
    assert [watch.update(backend.snapshot())[0].code for _ in range(SUSTAINED_SAMPLES)] == ["none"] * SUSTAINED_SAMPLES


@pytest.mark.parametrize(("rows", "code", "level"), [
    ({"correctable": 0, "uncorrectable": 1, "pending": True, "failed": False}, "row_remap_pending", Level.DEGRADED),
    ({"correctable": 2, "uncorrectable": 9, "pending": False, "failed": True}, "row_remap_failed", Level.FAILING)])
def test_row_remapping_pending_or_failed(fake: FakePynvml, rows: dict, code: str, level: Level) -> None:
    fake.device_data(0)["remapped_rows"] = rows
    verdict = assess([_h100(fake)])
    assert (verdict.code, verdict.level) == (code, level)


def test_pages_pending_retirement_degrade(fake: FakePynvml) -> None:
    fake.device_data(0)["retired_pages_pending"] = 1
    assert assess([_h100(fake)]).code == "retired_pages_pending"
