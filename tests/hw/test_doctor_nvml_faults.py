"""The doctor's NVML probe over a broken binding: an exception that is not an NVMLError is a fact with its
reason (and the doctor falls back to nvidia-smi), never a traceback."""

from __future__ import annotations

from typing import Any

from gpufly.doctor.probes import probe_driver_and_gpus
from tests.fakes.nvml import fake_nvml


def no_nvidia_smi(*args: Any, **kwargs: Any) -> Any:
    raise FileNotFoundError("nvidia-smi")


def test_an_exception_from_nvml_init_is_the_drivers_reason() -> None:
    fake = fake_nvml("nvml_two_gpus.json")
    fake.fail("nvmlInit", RuntimeError("driver is being reloaded"))
    driver, gpus = probe_driver_and_gpus(nvml=fake, run=no_nvidia_smi)
    assert gpus == [] and not driver.found
    assert driver.error == ("NVML failed to start (RuntimeError from the NVML binding: driver is being reloaded); "
                            "nvidia-smi not on PATH")


def test_an_exception_in_one_field_or_one_gpu_leaves_the_rest_of_the_probe() -> None:
    fake = fake_nvml("nvml_two_gpus.json")
    fake.fail("nvmlDeviceGetCudaComputeCapability", TypeError("bad argument type"))
    driver, gpus = probe_driver_and_gpus(nvml=fake, run=no_nvidia_smi)
    assert driver.found and [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
    assert [g.compute_capability for g in gpus] == [None, None] and gpus[0].memory_total_bytes
    fake.fail("nvmlDeviceGetHandleByIndex", OSError(5, "Input/output error"))
    _, gpus = probe_driver_and_gpus(nvml=fake, run=no_nvidia_smi)
    assert [g.name for g in gpus] == ["unknown (GPU lost or inaccessible)"] * 2
