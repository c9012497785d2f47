"""XID events in the hardware layer: registered once per GPU, drained without waiting on every sample, kept for
``XID_KEEP_S`` on an injected clock, refused registrations said why, and the event sets freed at the end."""

from __future__ import annotations

import pynvml
import pytest

from gpufly.hw import XID_KEEP_S, GpuReader, Nvml
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.hw.gpu import XID_KEEP_EVENTS
from tests.fakes.nvml import fake_nvml


class Clock:
    """Wall-clock seconds, stepped by hand."""

    def __init__(self, now: float = 1_733_350_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def watching(fake: FakePynvml, clock: Clock | None = None) -> GpuReader:
    nvml = Nvml(fake)
    assert nvml.open().available
    return GpuReader(nvml, watch_xids=True, clock=clock or Clock())


@pytest.fixture
def fake() -> FakePynvml:
    """The recorded H100 (with ECC) and MIG A100."""
    return fake_nvml("monitor/nvml_live.json")


def test_each_gpu_is_registered_once_and_drained_on_every_sample(fake: FakePynvml) -> None:
    clock = Clock()
    reader = watching(fake, clock)
    assert reader.sample(0).xid_events == [], "watched, nothing yet"
    fake.emit(0, 79)
    fake.emit(0, 13)
    clock.now += 1
    h100 = reader.sample(0)
    assert [(e.kind, e.xid, e.time, e.seq) for e in h100.xid_events] == [
        ("xid", 79, clock.now, 1), ("xid", 13, clock.now, 2)]
    clock.now += 1
    assert [e.seq for e in reader.sample(0).xid_events] == [1, 2], "kept, not delivered twice"
    assert fake.calls.count("nvmlDeviceRegisterEvents") == 1
    assert fake.calls.count("nvmlEventSetWait_v2") == 3 + 2, "one timeout per sample, one read per event"


def test_events_older_than_the_window_age_out_and_a_flood_is_bounded(fake: FakePynvml) -> None:
    clock = Clock()
    reader = watching(fake, clock)
    fake.emit(0, 48)
    reader.sample(0)
    clock.now += XID_KEEP_S
    assert [e.xid for e in reader.sample(0).xid_events] == [48], "still within the window at its edge"
    clock.now += 1
    assert reader.sample(0).xid_events == []
    for _ in range(XID_KEEP_EVENTS + 5):
        fake.emit(0, 13)
    events = reader.sample(0).xid_events
    assert len(events) == XID_KEEP_EVENTS and events[-1].seq == 1 + XID_KEEP_EVENTS + 5, "the newest are kept"


def test_double_bit_ecc_events_are_asked_for_only_where_the_gpu_offers_them(fake: FakePynvml) -> None:
    fake.emit(0, ecc="double_bit")
    assert [(e.kind, e.xid) for e in watching(fake).sample(0).xid_events] == [("ecc_double_bit", None)]
    geforce = FakePynvml.node(1)
    geforce.emit(0, ecc="double_bit")
    geforce.emit(0, 31)
    assert [(e.kind, e.xid) for e in watching(geforce).sample(0).xid_events] == [("xid", 31)], "no ECC: XIDs only"


def test_a_refused_registration_says_why_and_is_not_asked_again(fake: FakePynvml) -> None:
    fake.device_data(0)["not_supported"].append("nvmlDeviceRegisterEvents")
    reader = watching(fake)
    fake.emit(0, 79)
    first, second = reader.sample(0), reader.sample(0)
    assert first.xid_events is None and second.xid_events is None
    assert first.xid_unwatched == ("nvmlDeviceRegisterEvents: NVML_ERROR_NOT_SUPPORTED (the driver delivers no "
                                   "events here, as on WSL, in vGPU guests, on some consumer cards)")
    assert fake.calls.count("nvmlDeviceRegisterEvents") == 1
    assert fake.calls.count("nvmlEventSetFree") == 1, "the set made for it is freed at once"
    assert reader.sample(1).xid_events == [], "the other GPU is watched"


def test_a_gpu_offering_no_xid_events_is_unwatched_with_the_reason(fake: FakePynvml) -> None:
    fake.device_data(0)["supported_events"] = pynvml.nvmlEventTypePState
    assert watching(fake).sample(0).xid_unwatched == (
        "the driver offers no XID events on this GPU (nvmlDeviceGetSupportedEventTypes)")


def test_an_older_driver_without_the_v2_wait_falls_back_once(fake: FakePynvml) -> None:
    fake.fail("nvmlEventSetWait_v2", pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    reader = watching(fake)
    fake.emit(0, 74)
    assert [e.xid for e in reader.sample(0).xid_events] == [74]
    reader.sample(0)
    assert fake.calls.count("nvmlEventSetWait") == 3, "74, then a timeout on each sample"


def test_a_wait_that_fails_is_named_and_the_sample_goes_on(fake: FakePynvml) -> None:
    fake.fail("nvmlEventSetWait_v2", RuntimeError("driver reloading"))
    h100 = watching(fake).sample(0)
    assert h100.xid_events == [] and h100.power_w is not None
    assert h100.unavailable == "xid_events: RuntimeError from the NVML binding: driver reloading"


def test_a_reader_not_asked_to_watch_registers_nothing(fake: FakePynvml) -> None:
    nvml = Nvml(fake)
    nvml.open()
    h100 = GpuReader(nvml).sample(0)
    assert h100.xid_events is None and h100.xid_unwatched is None
    assert "nvmlEventSetCreate" not in fake.calls


def test_close_frees_every_event_set(fake: FakePynvml) -> None:
    reader = watching(fake)
    reader.sample(0)
    reader.sample(1)
    reader.close()
    assert fake.calls.count("nvmlEventSetFree") == 2


def test_a_lost_gpu_is_lost_and_registered_once_it_is_back(fake: FakePynvml) -> None:
    fake.lose(0)
    reader = watching(fake)
    assert reader.sample(0).lost
    assert "nvmlDeviceRegisterEvents" not in fake.calls


@pytest.mark.gpu
def test_real_nvml_registers_for_xids_and_drains_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real driver: each GPU is watched (a list, drained with a zero timeout) or says why not. The timeout
    each wait is given is recorded (counted, not timed: a busy machine cannot make it fail)."""
    timeouts: list[int] = []
    for name in ("nvmlEventSetWait_v2", "nvmlEventSetWait"):
        real = getattr(pynvml, name, None)
        if real is not None:
            def recording(event_set: object, timeout_ms: int, real: object = real) -> object:
                timeouts.append(timeout_ms)
                return real(event_set, timeout_ms)  # type: ignore[operator]

            monkeypatch.setattr(pynvml, name, recording)
    nvml = Nvml()
    assert nvml.open().available
    reader = GpuReader(nvml, watch_xids=True)
    try:
        for index in range(nvml.device_count()):
            first, second = reader.sample(index), reader.sample(index)
            assert set(timeouts) <= {0}, f"a zero timeout: draining never waits for an event, got {timeouts}"
            for gpu in (first, second):
                assert (gpu.xid_events is None) == (gpu.xid_unwatched is not None), gpu.xid_unwatched
                assert "xid_events" not in (gpu.unavailable or ""), gpu.unavailable
    finally:
        reader.close()
        nvml.close()
