"""The GPU facts beside each number, read through a fake NVML; and the fp32-matmul setting restored."""

from __future__ import annotations

import pynvml
import pytest

from gpufly.bench.cuda import GpuState, fp32_matmul, nvml_index
from gpufly.hw import GpuDevice, Nvml
from gpufly.hw.fake_nvml import FakePynvml
from tests.fakes.nvml import fake_nvml


def _devices() -> list[GpuDevice]:
    return [GpuDevice(0, "H100", uuid="GPU-aaaa"), GpuDevice(1, "A100", uuid="GPU-bbbb")]


def test_torch_gpus_are_found_in_nvml_by_uuid() -> None:
    assert nvml_index(_devices(), "bbbb", 0) == 1
    assert nvml_index(_devices(), "GPU-AAAA", 1) == 0
    assert nvml_index(_devices(), "cccc", 0) is None
    assert nvml_index(_devices(), None, 1) == 1
    assert nvml_index(_devices(), None, 5) is None


def test_state_reads_clocks_power_temperature_and_slowdown_reasons() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    state = GpuState(Nvml(fake), "6f1c2a3e-8d55-4b1e-9f0a-2b7c41d0e911", 1)
    assert state.driver_version() == "550.54.15"
    assert (state.clock_mhz("sm"), state.clock_mhz("sm", maximum=True), state.clock_mhz("mem", maximum=True)) == (
        1755, 1980, 2619)
    assert state.power_limit_w() == 700.0
    assert state.conditions() == {"sm_clock_mhz": 1755, "memory_clock_mhz": 2619, "power_w": 698.5,
                                  "temperature_c": 71, "clocks_event_reasons": ["sw_power_cap"],
                                  "slowdown_reasons": ["sw_power_cap"]}
    state.close()
    assert fake.calls[-1] == "nvmlShutdown"


def test_what_nvml_cannot_say_is_left_out() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    fake.device_data(1)["not_supported"] = ["nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage",
                                            "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTemperature",
                                            "nvmlDeviceGetCurrentClocksEventReasons"]
    state = GpuState(Nvml(fake), "1d9e7b42-03a6-4c8f-b5e2-7a60c3f2d408", 0)
    assert state.clock_mhz("sm") is None and state.clock_mhz("sm", maximum=True) == 1410
    assert state.power_limit_w() is None
    assert state.conditions() == {}


def test_a_gpu_lost_after_the_start_reads_nothing() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    state = GpuState(Nvml(fake), None, 0)
    fake.lose(0)
    assert state.clock_mhz("sm") is None and state.conditions() == {}


def test_without_nvml_every_reading_is_none() -> None:
    for fake in (fake_nvml("hw/no_driver.json"), FakePynvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)):
        state = GpuState(Nvml(fake), None, 0)
        assert state.driver_version() is None and state.clock_mhz("sm") is None
        assert state.power_limit_w() is None and state.conditions() == {}


@pytest.mark.parametrize("tf32", [True, False])
def test_fp32_matmul_precision_is_restored(tf32: bool) -> None:
    import torch

    before = torch.backends.cuda.matmul.fp32_precision
    with fp32_matmul(torch, tf32):
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
    assert torch.backends.cuda.matmul.fp32_precision == before
