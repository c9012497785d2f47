"""The NVML choke point: facts instead of exceptions, None for fields a card lacks, lost GPUs."""

from __future__ import annotations

import pynvml

from gpufly.monitor.backends.nvml import Nvml
from tests.fakes.pynvml_fake import FakePynvml


def test_no_driver_is_a_fact_not_an_exception() -> None:
    nvml = Nvml(FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    status = nvml.open()
    assert status.available is False
    assert status.reason == "NVML library not found (no NVIDIA driver installed)"


def test_driver_not_loaded_is_named() -> None:
    status = Nvml(FakePynvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).open()
    assert status.reason == "NVIDIA driver installed but not loaded"


def test_recorded_host_reads_back() -> None:
    fake = FakePynvml.from_fixture("nvml_two_gpus.json")
    with Nvml(fake) as nvml:
        assert nvml.open().available
        assert nvml.driver_version() == "550.54.15"
        assert nvml.cuda_driver_version() == "12.4"
        first, second = nvml.devices()
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.memory_total_bytes == 85520809984
    assert first.compute_capability == "9.0"
    assert first.pci_bus_id == "00000000:18:00.0"
    assert second.pci_bus_id is None, "a call the card does not support reads as None"
    assert fake.calls[-1] == "nvmlShutdown"


def test_lost_gpu_is_marked_and_the_others_go_on() -> None:
    with Nvml(FakePynvml.from_fixture("nvml_two_gpus.json", lost=(0,))) as nvml:
        nvml.open()
        lost, alive = nvml.devices()
    assert lost.lost is True and lost.memory_total_bytes is None
    assert alive.lost is False and alive.name == "NVIDIA A100-SXM4-80GB"


def test_real_nvml_on_this_machine_never_raises() -> None:
    nvml = Nvml()
    status = nvml.open()
    assert isinstance(status.available, bool)
    if not status.available:
        assert status.reason
    nvml.close()
