"""The one GPU reader over recorded machines: static facts, samples, unsupported fields, lost GPUs, MIG."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pynvml
import pytest

from gpufly.hw import GpuDevice, GpuReader, GpuSample, Nvml, throttle_reason_names
from gpufly.hw.fake_nvml import FakePynvml
from tests.fakes.nvml import fake_nvml


def reader_for(fake: FakePynvml) -> GpuReader:
    nvml = Nvml(fake)
    assert nvml.open().available
    return GpuReader(nvml)


def test_static_facts_of_a_recorded_host() -> None:
    reader = reader_for(fake_nvml("nvml_two_gpus.json"))
    first, second = reader.devices()
    assert (first.name, first.memory_total_bytes, first.compute_capability, first.pci_bus_id) == (
        "NVIDIA H100 80GB HBM3", 85520809984, "9.0", "00000000:18:00.0")
    assert first.uuid == "GPU-6f1c2a3e-8d55-4b1e-9f0a-2b7c41d0e911"
    assert second.pci_bus_id is None, "a call the card does not support reads as None"
    assert first.pcie_gen_current is None and first.mig_mode is None, "not in the fixture: not supported"


def test_pcie_link_mig_and_persistence_for_the_doctor() -> None:
    a6000, a100 = reader_for(fake_nvml("hw/nvml_degraded_pcie.json")).devices()
    assert (a6000.compute_capability, a6000.mig_mode, a6000.persistence_mode) == ("8.6", None, True)
    assert (a100.pcie_gen_current, a100.pcie_gen_max, a100.pcie_width_current, a100.pcie_width_max) == (3, 4, 8, 16)
    assert (a100.mig_mode, a100.persistence_mode) == (False, False)


def test_static_facts_are_read_once_per_gpu() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    reader = reader_for(fake)
    reader.sample(0)
    asked = fake.calls.count("nvmlDeviceGetUUID")
    reader.sample(0)
    reader.device(0)
    assert fake.calls.count("nvmlDeviceGetUUID") == asked == 1
    assert fake.calls.count("nvmlDeviceGetPowerUsage") == 2, "the moving state is read on every sample"
    assert fake.calls.count("nvmlDeviceGetMemoryInfo") == 2, "one call a sample feeds used, free and total"


def test_a_sample_carries_static_and_moving_state_in_base_units() -> None:
    h100 = reader_for(fake_nvml("monitor/nvml_live.json")).sample(0)
    assert (h100.name, h100.minor_number, h100.sm_clock_max_mhz) == ("NVIDIA H100 80GB HBM3", 0, 1980)
    assert h100.power_w == pytest.approx(698.5) and h100.energy_j == pytest.approx(912345.678)
    assert h100.throttle_reasons == ["sw_power_cap"] and h100.fan_percent is None
    assert [(p.pid, p.kind, p.gpu_memory_bytes) for p in h100.processes] == [(4242, "compute", 60129542144)]
    assert h100.processes[0].user is None, "the OS side of a process is the monitor's to join"


def test_mig_instances_come_with_the_sample() -> None:
    a100 = reader_for(fake_nvml("monitor/nvml_live.json")).sample(1)
    assert a100.mig_enabled is True
    assert [(m.gpu_instance_id, m.profile, m.memory_total_bytes) for m in a100.mig] == [
        (1, "3g.40gb", 42949672960), (2, "3g.40gb", 42949672960)]


def test_a_gpu_lost_keeps_its_name_and_the_other_goes_on() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    reader = reader_for(fake)
    assert not reader.sample(0).lost
    fake.lose(0)
    lost, alive = reader.sample(0), reader.sample(1)
    assert lost.lost and lost.name == "NVIDIA H100 80GB HBM3" and lost.power_w is None
    assert not alive.lost and alive.power_w == pytest.approx(92.0)


def test_a_gpu_lost_from_the_start_is_marked() -> None:
    reader = reader_for(fake_nvml("nvml_two_gpus.json", lost=(0,)))
    lost, alive = reader.devices()
    assert lost == GpuDevice(0, "unknown (GPU lost or inaccessible)", lost=True)
    assert reader.sample(0).lost and reader.sample(0).name == "unknown GPU"
    assert alive.name == "NVIDIA A100-SXM4-80GB"


def test_the_older_throttle_call_answers_where_the_newer_one_does_not() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    fake.device_data(0)["not_supported"].append("nvmlDeviceGetCurrentClocksEventReasons")
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x40  # type: ignore[attr-defined]
    assert reader_for(fake).sample(0).throttle_reasons == ["hw_thermal_slowdown"]


def test_throttle_bits_are_nvmls() -> None:
    assert throttle_reason_names(pynvml.nvmlClocksThrottleReasonHwSlowdown) == ["hw_slowdown"]
    assert throttle_reason_names(pynvml.nvmlClocksThrottleReasonSwThermalSlowdown) == ["sw_thermal_slowdown"]
    assert throttle_reason_names(0) == []


@pytest.mark.parametrize("record", [GpuDevice, GpuSample])
def test_every_declared_read_names_a_real_pynvml_function_and_its_constants(record: type) -> None:
    """Caught here, not on a GPU machine: a typo in a function or constant name would read as "not supported"."""
    reads = [item.metadata["nvml"] for item in fields(record) if "nvml" in item.metadata]
    assert reads
    for how in reads:
        assert any(callable(getattr(pynvml, name, None)) for name in how.functions), how.functions
        assert all(isinstance(getattr(pynvml, name, None), int) for name in how.args), how.args


def test_a_node_of_any_size_lists_its_processes_and_answers_not_supported_like_a_geforce() -> None:
    reader = reader_for(FakePynvml.node(32, pids=list(range(100, 164)), processes_per_gpu=8))
    samples = [reader.sample(index) for index in range(reader.count())]
    assert len(samples) == 32 and {s.name for s in samples} == {"NVIDIA GeForce RTX 4090"}
    assert [p.pid for p in samples[0].processes] == list(range(100, 108))
    assert [p.pid for p in samples[8].processes] == list(range(100, 108)), "64 pids over 256 slots: each on 4 GPUs"
    assert samples[31].ecc_corrected_volatile is None and samples[31].mig_enabled is None, "not supported"
    assert samples[31].power_w == pytest.approx(402.0) and samples[31].unavailable is None, "N/A is no failure"


BINDING_FAILURES = [RuntimeError("driver is being reloaded"), OSError(5, "Input/output error"),
                    AttributeError("'NoneType' object has no attribute 'contents'"), TypeError("bad argument type")]


@pytest.mark.parametrize("failure", BINDING_FAILURES, ids=lambda exc: type(exc).__name__)
def test_a_field_the_binding_fails_on_is_none_with_the_reason_and_the_rest_is_read(failure: Exception) -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    fake.fail("nvmlDeviceGetMemoryInfo", failure)
    reader = reader_for(fake)
    h100 = reader.sample(0)
    assert not h100.lost and h100.memory_used_bytes is None and h100.memory_total_bytes is None
    assert h100.unavailable == (f"memory_total_bytes, memory_used_bytes, memory_free_bytes: "
                                f"{type(failure).__name__} from the NVML binding: {failure}")
    assert h100.power_w == pytest.approx(698.5) and h100.processes, "the other fields and the processes are read"
    assert h100.fan_percent is None and "fan" not in h100.unavailable, "not supported is N/A, not a failure"
    fake.fail("nvmlDeviceGetMemoryInfo", None)
    assert reader.sample(0).unavailable is None
    assert reader.device(0).memory_total_bytes == 85520809984, "a static fact that failed is asked again"


@pytest.mark.parametrize("failure", BINDING_FAILURES, ids=lambda exc: type(exc).__name__)
def test_a_gpu_whose_handle_the_binding_fails_on_is_lost_with_the_reason(failure: Exception) -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    reader = reader_for(fake)
    reader.sample(0)
    fake.fail("nvmlDeviceGetHandleByIndex", failure)
    lost = reader.sample(0)
    assert lost.lost and lost.name == "NVIDIA H100 80GB HBM3", "the name seen before is kept"
    assert lost.unavailable == f"{type(failure).__name__} from the NVML binding: {failure}"
    fake.fail("nvmlDeviceGetHandleByIndex", None)
    assert not reader.sample(0).lost, "the next sample asks again"


def test_a_gpu_that_falls_off_the_bus_says_so() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    reader = reader_for(fake)
    fake.lose(1)
    assert reader.sample(1).unavailable == "fallen off the bus (NVML_ERROR_GPU_IS_LOST)"


def test_an_nvml_error_other_than_not_supported_is_named() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    fake.fail("nvmlDeviceGetTemperature", pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION))
    h100 = reader_for(fake).sample(0)
    assert h100.temperature_c is None and h100.unavailable == "temperature_c: NVML_ERROR_NO_PERMISSION"


def test_an_answer_gpufly_cannot_read_is_a_reason_not_a_crash() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    fake.nvmlDeviceGetName = lambda handle: b"\xff\xfe"  # type: ignore[method-assign]
    fake.nvmlDeviceGetPowerUsage = lambda handle: "698500"  # type: ignore[method-assign]
    h100 = reader_for(fake).sample(0)
    assert h100.name == "unknown" and h100.power_w is None and not h100.lost


def test_a_process_list_gpufly_cannot_read_lists_what_it_can() -> None:
    fake = fake_nvml("monitor/nvml_live.json")
    fake.nvmlDeviceGetComputeRunningProcesses = lambda handle: [  # type: ignore[method-assign]
        SimpleNamespace(pid=4242, usedGpuMemory=1024), None, SimpleNamespace(pid="7", usedGpuMemory=None)]
    fake.nvmlDeviceGetGraphicsRunningProcesses = lambda handle: 17  # type: ignore[method-assign]
    fake.nvmlDeviceGetProcessUtilization = lambda handle, since: [  # type: ignore[method-assign]
        SimpleNamespace(pid=4242, smUtil=None, timeStamp=5), object()]
    h100 = reader_for(fake).sample(0)
    assert [(p.pid, p.kind, p.gpu_memory_bytes, p.gpu_sm_percent) for p in h100.processes] == [
        (4242, "compute", 1024, None)]
