"""The GPU watch with a fake GPU source: what it keeps, its thread, and that it needs nothing of the monitor."""

from __future__ import annotations

import ast
from pathlib import Path

import gpufly.profile
from gpufly.profile.gpuwatch import GpuWatch
from gpufly.profile.records import GpuReading

from .fakes import FakeClock, FakeGpuSource, gpu_sample


def test_each_sample_of_the_profiled_gpu_becomes_a_reading_and_a_lost_gpu_none() -> None:
    source = FakeGpuSource(gpu_sample(utilization=40.0, reasons=("sw_power_cap",)), gpu_sample(lost=True),
                           gpu_sample(utilization=95.0))
    clock = FakeClock(now=1700000000.0)
    readings: list[GpuReading] = []
    watch = GpuWatch(2, 3600.0, readings, connect=lambda: source, clock=clock)
    assert watch.start()
    assert source.wait_for_reads(1), "the thread reads once at the start, then waits an interval"
    for _ in range(2):
        clock.advance(0.5)
        watch.sample_once()
    watch.stop()
    assert source.indexes == [2, 2, 2], "the GPU the loop runs on"
    assert [(r.time, r.utilization_percent) for r in readings] == [(1700000000.0, 40.0), (1700000001.0, 95.0)]
    assert source.closed
    assert readings[0].slowdown_reasons == ["sw_power_cap"] and readings[0].power_limit_w == 700.0


def test_the_watch_samples_on_its_own_thread_until_stopped_and_closes_its_source() -> None:
    source = FakeGpuSource()
    readings: list[GpuReading] = []
    watch = GpuWatch(0, 0.001, readings, connect=lambda: source)
    assert watch.start()
    assert source.wait_for_reads(3), "the thread keeps sampling"
    watch.stop()
    kept = len(readings)
    assert kept >= 3 and source.closed
    watch.sample_once()
    assert len(readings) == kept, "nothing is read once stopped"


def test_without_nvml_nothing_is_sampled() -> None:
    readings: list[GpuReading] = []
    watch = GpuWatch(0, 0.001, readings, connect=lambda: None)
    assert watch.start() is False
    watch.stop()
    assert readings == []


def test_the_profile_package_reads_the_gpu_through_the_hardware_layer_not_the_monitor() -> None:
    package = Path(gpufly.profile.__file__).parent
    imported = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert not [name for name in imported if name.startswith("gpufly.monitor")]
    assert "gpufly.hw" in imported


FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_by_default_the_watch_reads_nvml_through_the_hardware_layer(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A recorded H100 at its power cap (``gpufly.hw``'s fake NVML): the reading the throttling rule needs."""
    from gpufly.hw import FIXTURE_ENV

    monkeypatch.setenv(FIXTURE_ENV, str(FIXTURES / "monitor" / "nvml_live.json"))
    readings: list[GpuReading] = []
    watch = GpuWatch(0, 3600.0, readings)
    assert watch.start()
    watch.sample_once()
    watch.stop()
    assert readings, "one reading from the thread's start or the call, or both"
    reading = readings[-1]
    assert (reading.utilization_percent, reading.power_w, reading.power_limit_w) == (97, 698.5, 700.0)
    assert (reading.sm_clock_mhz, reading.sm_clock_max_mhz) == (1755, 1980)
    assert reading.memory_used_bytes == 61203283968 and reading.slowdown_reasons == ["sw_power_cap"]


def test_a_machine_without_a_driver_is_profiled_without_gpu_readings(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpufly.hw import FIXTURE_ENV

    monkeypatch.setenv(FIXTURE_ENV, str(FIXTURES / "hw" / "no_driver.json"))
    readings: list[GpuReading] = []
    assert GpuWatch(0, 0.001, readings).start() is False
    assert readings == []


def test_the_energy_counter_gives_joules_per_sample_in_the_report_and_its_absence_is_said() -> None:
    from gpufly.profile.records import ProfileData, StepRecord
    from gpufly.profile.render import receipt_lines, summary

    source = FakeGpuSource(gpu_sample(energy_j=5000.0), gpu_sample(energy_j=5600.0), gpu_sample(energy_j=6200.0))
    clock = FakeClock(now=100.0)
    readings: list[GpuReading] = []
    watch = GpuWatch(0, 3600.0, readings, connect=lambda: source, clock=clock)
    assert watch.start() and source.wait_for_reads(1)
    for _ in range(2):
        clock.advance(2.0)
        watch.sample_once()
    watch.stop()
    steps = [StepRecord(index=i, wall_s=0.1, batch_size=30) for i in range(10)]  # 300 samples/s
    facts = summary(ProfileData(steps=steps, gpu=readings), [])
    assert facts["energy"]["mean_power_w"] == 300.0, "1200 J over 4 s, from the counter"
    assert abs(facts["energy"]["joules_per_sample"] - 1.0) < 1e-9
    assert any(line.startswith("energy: 1 J per sample (300 W mean over 4.0 s") for line in receipt_lines(facts))
    bare = summary(ProfileData(steps=steps), [])
    assert bare["energy"]["joules_per_sample"] is None
    assert "energy: not measured (no NVML energy counter" in "\n".join(receipt_lines(bare))
