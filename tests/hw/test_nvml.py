"""The NVML session: one loader (with the fixture seam), one choke point, facts instead of exceptions."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from gpufly.errors import GpuflyError
from gpufly.hw import FIXTURE_ENV, Nvml, load_pynvml
from gpufly.hw import nvml as nvml_module
from gpufly.hw.fake_nvml import FakePynvml
from tests.fakes.nvml import FIXTURES, fake_nvml


def test_no_driver_is_a_fact_not_an_exception() -> None:
    nvml = Nvml(FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    status = nvml.open()
    assert status.available is False
    assert status.reason == "NVML library not found (no NVIDIA driver installed)"


def test_driver_not_loaded_is_named() -> None:
    status = Nvml(FakePynvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)).open()
    assert status.reason == "NVIDIA driver installed but not loaded"


def test_recorded_host_reads_back_and_closes() -> None:
    fake = fake_nvml("nvml_two_gpus.json")
    with Nvml(fake) as nvml:
        assert nvml.open().available
        assert nvml.driver_version() == "550.54.15"
        assert nvml.cuda_driver_version() == "12.4"
        assert nvml.device_count() == 2
    assert fake.calls[-1] == "nvmlShutdown"


def test_query_takes_a_function_or_its_name_and_never_raises() -> None:
    fake = fake_nvml("nvml_two_gpus.json", lost=(1,))
    with Nvml(fake) as nvml:
        nvml.open()
        assert nvml.query("nvmlDeviceGetName", 0) == nvml.query(fake.nvmlDeviceGetName, 0) == "NVIDIA H100 80GB HBM3"
        assert nvml.query("nvmlDeviceGetPciInfo", 1) is None, "GPU lost: None"
        assert nvml.call("nvmlDeviceGetName", 1) == (None, "NVML_ERROR_GPU_IS_LOST")
        assert nvml.call("nvmlDeviceGetFanSpeed", 0) == (None, "NVML_ERROR_NOT_SUPPORTED"), "not in the fixture"


def test_a_function_this_binding_lacks_reads_as_none() -> None:
    with Nvml(pynvml) as nvml:
        assert nvml.function("nvmlDeviceGetSomethingFromTheFuture") is None
        assert nvml.call("nvmlDeviceGetSomethingFromTheFuture", 0) == (None, "NVML_ERROR_FUNCTION_NOT_FOUND")


def test_the_fixture_variable_swaps_in_the_recorded_machine() -> None:
    assert load_pynvml({}) is pynvml
    fake = load_pynvml({FIXTURE_ENV: str(FIXTURES / "hw" / "no_driver.json")})
    assert isinstance(fake, FakePynvml)
    assert Nvml(fake).open().reason == "NVML library not found (no NVIDIA driver installed)"


def test_an_unreadable_fixture_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="cannot read the NVML fixture"):
        load_pynvml({FIXTURE_ENV: str(tmp_path / "missing.json")})


def test_real_nvml_on_this_machine_never_raises() -> None:
    nvml = Nvml()
    status = nvml.open()
    assert isinstance(status.available, bool)
    if not status.available:
        assert status.reason
    nvml.close()


BINDING_FAILURES = [RuntimeError("driver is being reloaded"), OSError(5, "Input/output error"),
                    AttributeError("module 'pynvml' has no attribute 'nvmlInit_v2'"), TypeError("bad argument type")]
"""What a broken pynvml or a driver being reloaded raises instead of an NVMLError."""


@pytest.mark.parametrize("failure", BINDING_FAILURES, ids=lambda exc: type(exc).__name__)
def test_any_exception_from_nvml_init_is_a_reason_not_a_crash(failure: Exception) -> None:
    fake = fake_nvml("nvml_two_gpus.json")
    fake.fail("nvmlInit", failure)
    status = Nvml(fake).open()
    assert status.available is False
    assert status.reason and status.reason.startswith(("NVML failed to start", "NVML library could not be loaded"))
    assert str(failure.args[-1]) in status.reason


@pytest.mark.parametrize("failure", BINDING_FAILURES, ids=lambda exc: type(exc).__name__)
def test_any_exception_from_a_call_is_named_and_never_raised(failure: Exception) -> None:
    fake = fake_nvml("nvml_two_gpus.json")
    with Nvml(fake) as nvml:
        nvml.open()
        fake.fail("nvmlDeviceGetName", failure)
        value, error = nvml.call("nvmlDeviceGetName", 0)
        assert value is None and error == f"{type(failure).__name__} from the NVML binding: {failure}"
        assert nvml.query("nvmlDeviceGetUUID", 0) is not None, "the other calls go on"
        fake.fail("nvmlDeviceGetName", None)
        assert nvml.query("nvmlDeviceGetName", 0) == "NVIDIA H100 80GB HBM3", "and the failing one once healed"


@pytest.mark.parametrize("failure", BINDING_FAILURES, ids=lambda exc: type(exc).__name__)
def test_a_count_nvml_cannot_give_comes_with_the_reason(failure: Exception) -> None:
    fake = fake_nvml("nvml_two_gpus.json")
    with Nvml(fake) as nvml:
        nvml.open()
        assert nvml.count_devices() == (2, None)
        fake.fail("nvmlDeviceGetCount", failure)
        assert nvml.count_devices() == (
            0, f"NVML could not list the GPUs ({type(failure).__name__} from the NVML binding: {failure})")
        assert nvml.device_count() == 0


def test_error_names_are_looked_up_once_per_session_not_once_per_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-ml-py has about 2,500 names; scanning them for every "not supported" cost 0.2 ms a field."""
    scans: list[object] = []
    scan = nvml_module.error_names
    monkeypatch.setattr(nvml_module, "error_names", lambda lib: scans.append(lib) or scan(lib))
    fake = FakePynvml.node(2)
    with Nvml(fake) as nvml:
        nvml.open()
        for _ in range(10):
            assert nvml.call("nvmlDeviceGetTotalEccErrors", 0, 0, 0) == (None, "NVML_ERROR_NOT_SUPPORTED")
        fake.lose(1)
        assert nvml.call("nvmlDeviceGetName", 1) == (None, "NVML_ERROR_GPU_IS_LOST")
    assert len(scans) == 1
