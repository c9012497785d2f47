"""The GPU facts beside each number, read through a fake NVML; and the fp32-matmul setting restored."""

from __future__ import annotations

from typing import ClassVar

import pynvml
import pytest

from gpufly.bench.cuda import GpuState, fp32_matmul, nvml_index
from gpufly.monitor.backends.nvml import GpuDevice
from tests.fakes.pynvml_fake import FakePynvml


class ClockedNvml(FakePynvml):
    """The shared fake, plus the clock, power and temperature calls the bench reads."""

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    CLOCKS: ClassVar[dict[int, dict[int, tuple[int, int]]]] = {
        0: {pynvml.NVML_CLOCK_SM: (1755, 1980), pynvml.NVML_CLOCK_MEM: (2619, 2619)},
        1: {pynvml.NVML_CLOCK_SM: (1410, 1410), pynvml.NVML_CLOCK_MEM: (1593, 1593)}}

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        self._device(handle, "nvmlDeviceGetClockInfo")
        return self.CLOCKS[handle][kind][0]

    def nvmlDeviceGetMaxClockInfo(self, handle: int, kind: int) -> int:
        self._device(handle, "nvmlDeviceGetMaxClockInfo")
        return self.CLOCKS[handle][kind][1]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._device(handle, "nvmlDeviceGetEnforcedPowerLimit").get("power_limit_mw", 700_000)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._device(handle, "nvmlDeviceGetPowerUsage")
        return 412_345

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        self._device(handle, "nvmlDeviceGetTemperature")
        return 61


def _devices() -> list[GpuDevice]:
    return [GpuDevice(0, "H100", "GPU-aaaa", None, None, None), GpuDevice(1, "A100", "GPU-bbbb", None, None, None)]


def test_torch_gpus_are_found_in_nvml_by_uuid() -> None:
    assert nvml_index(_devices(), "bbbb", 0) == 1
    assert nvml_index(_devices(), "GPU-AAAA", 1) == 0
    assert nvml_index(_devices(), "cccc", 0) is None
    assert nvml_index(_devices(), None, 1) == 1
    assert nvml_index(_devices(), None, 5) is None


def test_state_reads_clocks_power_and_temperature() -> None:
    lib = ClockedNvml.from_fixture("nvml_two_gpus.json")
    state = GpuState(lib, "6f1c2a3e-8d55-4b1e-9f0a-2b7c41d0e911", 1)
    assert state.driver_version() == "550.54.15"
    assert (state.clock_mhz("sm"), state.clock_mhz("sm", maximum=True), state.clock_mhz("mem", maximum=True)) == (
        1755, 1980, 2619)
    assert state.power_limit_w() == 700.0
    assert state.conditions() == {"sm_clock_mhz": 1755, "memory_clock_mhz": 2619, "power_w": 412.345,
                                  "temperature_c": 61}
    state.close()
    assert lib.calls[-1] == "nvmlShutdown"


def test_what_nvml_cannot_say_is_left_out() -> None:
    fixture = ClockedNvml.from_fixture("nvml_two_gpus.json")._data
    fixture["devices"][1]["not_supported"] = ["nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage",
                                              "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTemperature"]
    state = GpuState(ClockedNvml(fixture), "1d9e7b42-03a6-4c8f-b5e2-7a60c3f2d408", 0)
    assert state.clock_mhz("sm") is None and state.clock_mhz("sm", maximum=True) == 1410
    assert state.power_limit_w() is None
    assert state.conditions() == {}


def test_without_nvml_every_reading_is_none() -> None:
    for state in (GpuState(None, None, 0),
                  GpuState(ClockedNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), None, 0)):
        assert state.driver_version() is None and state.clock_mhz("sm") is None
        assert state.power_limit_w() is None and state.conditions() == {}


@pytest.mark.parametrize("tf32", [True, False])
def test_fp32_matmul_precision_is_restored(tf32: bool) -> None:
    import torch

    before = torch.backends.cuda.matmul.fp32_precision
    with fp32_matmul(torch, tf32):
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
    assert torch.backends.cuda.matmul.fp32_precision == before
