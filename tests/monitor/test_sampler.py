"""History ring buffers, energy and throttle totals, the sampler thread, and replay."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.hw import GpuSample, ProcessSample
from gpufly.monitor.backends.live import LiveBackend
from gpufly.monitor.backends.replay import ReplayBackend, read_recording
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import History, Sampler
from tests.fakes.nvml import fake_nvml

RECORDING = Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl"
PATIENCE_S = 60.0
"""How long a test waits for the sampler thread to reach a count: a bound for a hung thread, not a timing."""


def _snapshot(t: float, power: float | None, energy: float | None = None, reasons: list[str] | None = None,
              util: float = 50.0) -> Snapshot:
    gpu = GpuSample(index=0, name="GPU", power_w=power, energy_j=energy, throttle_reasons=reasons,
                    utilization_gpu_percent=util)
    return Snapshot(time=t, hostname="h", gpus=[gpu])


def test_ring_buffer_keeps_the_newest() -> None:
    history = History(capacity=3)
    for t in range(5):
        history.add(_snapshot(float(t), 100.0, util=float(t)))
    assert history.series(0, "utilization_gpu_percent") == [(2.0, 2.0), (3.0, 3.0), (4.0, 4.0)]
    assert history.samples == 5


def test_energy_prefers_the_counter_and_falls_back_to_integrating_power() -> None:
    counted = History()
    for t, energy in enumerate([1000.0, 1300.0, 1700.0]):
        counted.add(_snapshot(float(t), 999.0, energy=energy))
    assert counted.energy_since_start_j(0) == pytest.approx(700.0)
    integrated = History()
    for t, power in enumerate([100.0, 200.0, 200.0]):
        integrated.add(_snapshot(float(t), power))
    assert integrated.energy_since_start_j(0) == pytest.approx(150.0 + 200.0), "trapezoids over 1 s steps"


def test_throttle_seconds_count_slowdowns_only() -> None:
    history = History()
    for t, reasons in enumerate([["sw_power_cap"], ["sw_power_cap", "gpu_idle"], [], ["hw_thermal_slowdown"]]):
        history.add(_snapshot(t * 2.0, 100.0, reasons=reasons))
    assert history.throttle_seconds(0) == {"sw_power_cap": 4.0}, "gpu_idle is not a slowdown; the last is open"


class FakeClock:
    """The sampler's clock and wait: waiting moves time on at once, and each wait is noted."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def test_run_takes_count_samples_keeping_to_the_interval() -> None:
    clock = FakeClock()
    seen: list[Snapshot] = []

    def costs_a_third_of_a_second(_: Snapshot) -> None:
        clock.now += 0.3

    sampler = Sampler(ReplayBackend(RECORDING), interval=1.0, listeners=[seen.append, costs_a_third_of_a_second],
                      clock=clock, wait=clock.wait)
    assert sampler.run(count=4) == 4
    assert len(seen) == sampler.history.samples == 4
    assert clock.waits == pytest.approx([0.7, 0.7, 0.7]), "a slow sample shortens the next wait; none after the last"
    assert [s.time for s in seen] == [s.time for s in read_recording(RECORDING)[0][:4]]


def test_run_without_a_count_goes_until_stopped() -> None:
    clock = FakeClock()
    sampler = Sampler(ReplayBackend(RECORDING), interval=0.5, clock=clock, wait=clock.wait)

    def stop_after_three(_: Snapshot) -> None:
        if sampler.history.samples == 3:
            sampler.stop()

    sampler.listeners.append(stop_after_three)
    assert sampler.run() == 3


def test_in_the_foreground_a_listener_error_ends_the_run() -> None:
    def full_disk(_: Snapshot) -> None:
        raise GpuflyError("cannot write run.jsonl: No space left on device")

    clock = FakeClock()
    sampler = Sampler(ReplayBackend(RECORDING), listeners=[full_disk], clock=clock, wait=clock.wait)
    with pytest.raises(GpuflyError, match="No space left"):
        sampler.run(count=5)
    assert clock.waits == []


def test_sampler_thread_feeds_history_and_listeners_on_its_schedule() -> None:
    clock = FakeClock()
    seen: list[Snapshot] = []
    five = threading.Event()

    def listener(snapshot: Snapshot) -> None:
        seen.append(snapshot)
        if len(seen) == 5:
            five.set()

    sampler = Sampler(ReplayBackend(RECORDING), interval=2.0, listeners=[listener], clock=clock,
                      wait=clock.wait).start()
    assert five.wait(timeout=PATIENCE_S)
    sampler.stop()
    assert clock.waits[:4] == [2.0, 2.0, 2.0, 2.0]
    assert sampler.history.samples == len(seen) >= 5
    assert sampler.cost_per_sample_s is not None and sampler.cost_per_sample_s > 0


def test_a_failing_listener_does_not_stop_the_sampler_thread() -> None:
    failures = threading.Event()

    def broken(_: Snapshot) -> None:
        if len(sampler.errors) >= 1:
            failures.set()
        raise OSError("No space left on device")

    clock = FakeClock()
    sampler = Sampler(ReplayBackend(RECORDING), interval=0.01, listeners=[broken], clock=clock, wait=clock.wait)
    sampler.start()
    assert failures.wait(timeout=PATIENCE_S)
    sampler.stop()
    assert "No space left" in sampler.errors[0]
    assert sampler.history.samples >= 2, "it went on sampling after the first failure"


def test_a_binding_that_breaks_and_recovers_mid_run_costs_samples_not_the_run() -> None:
    """`watch` samples in the foreground, where an error ends the run: NVML's must never be one."""
    fake = fake_nvml("monitor/nvml_live.json")
    faults = iter([("nvmlDeviceGetCount", RuntimeError("driver is being reloaded")), ("nvmlDeviceGetCount", None)])

    def driver_reload(_: Snapshot) -> None:
        fake.fail(*next(faults, ("nvmlDeviceGetCount", None)))

    clock = FakeClock()
    seen: list[Snapshot] = []
    sampler = Sampler(LiveBackend(fake), listeners=[seen.append, driver_reload], clock=clock, wait=clock.wait)
    assert sampler.run(count=3) == 3
    assert [len(snapshot.gpus) for snapshot in seen] == [2, 0, 2]
    assert seen[1].gpu_status == ("NVML could not list the GPUs "
                                  "(RuntimeError from the NVML binding: driver is being reloaded)")


def test_replay_plays_the_recording_in_order_and_loops() -> None:
    backend = ReplayBackend(RECORDING, loop=True)
    times = [backend.snapshot().time for _ in range(121)]
    assert times[:120] == sorted(times[:120]) and times[120] == times[0]
    assert backend.interval_s == pytest.approx(1.0)
    held = ReplayBackend(RECORDING, loop=False)
    last = [held.snapshot().time for _ in range(125)][-1]
    assert last == times[119]


def test_replay_round_trips_every_field() -> None:
    snapshots, skipped = read_recording(RECORDING)
    assert skipped == 0 and len(snapshots) == 120
    first = snapshots[0]
    assert Snapshot.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    assert isinstance(first.gpus[0].processes[0], ProcessSample)
    assert snapshots[-1].gpus[0].lost and not snapshots[-1].gpus[1].lost


def test_a_line_cut_short_is_skipped(tmp_path: Path) -> None:
    lines = RECORDING.read_text().splitlines()[:4]
    damaged = tmp_path / "cut.jsonl"
    damaged.write_text("\n".join(lines[:3]) + "\n" + lines[3][:200])
    snapshots, skipped = read_recording(damaged)
    assert len(snapshots) == 3 and skipped == 1


def test_bad_recordings_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="no recording at"):
        read_recording(tmp_path / "missing.jsonl")
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n{}\n")
    with pytest.raises(GpuflyError, match="holds no snapshots"):
        read_recording(junk)
