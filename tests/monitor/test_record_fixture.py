"""scripts/record_nvml_fixture.py writes what the fake NVML reads: a recording reads as the machine it recorded."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml
import pytest

from gpufly.doctor.probes import probe_driver_and_gpus
from gpufly.hw import GpuReader, Nvml
from gpufly.hw.fake_nvml import FakePynvml
from tests.fakes.nvml import FIXTURES

SCRIPT = Path(__file__).parent.parent.parent / "scripts" / "record_nvml_fixture.py"


@pytest.fixture(scope="module")
def recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_nvml_fixture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fixture(name: str = "monitor/nvml_live.json") -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def _read(fixture: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """What gpufly's reader sees on the machine a fixture describes: every GPU's static facts and a sample."""
    with Nvml(FakePynvml(json.loads(json.dumps(fixture)))) as nvml:
        assert nvml.open().available
        reader = GpuReader(nvml)
        return reader.devices(), [reader.sample(index) for index in range(reader.count())]


@pytest.mark.parametrize("name", ["monitor/nvml_live.json", "hw/nvml_degraded_pcie.json", "nvml_two_gpus.json"])
def test_a_recording_reads_as_the_machine_it_recorded(recorder: ModuleType, name: str) -> None:
    fixture = _fixture(name)
    warnings: list[str] = []
    recorded = recorder.record(FakePynvml(json.loads(json.dumps(fixture))), description="test", warn=warnings.append)
    assert _read(recorded) == _read(fixture)
    assert warnings == []
    again = recorder.record(FakePynvml(json.loads(json.dumps(recorded))), description="test")
    assert again == recorded, "a recording records back to itself exactly"


def test_main_writes_the_file_and_it_replays(recorder: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "recorded.json"
    assert recorder.main([str(out), "--description", "test"], lib=FakePynvml(_fixture())) == 0
    recorded = json.loads(out.read_text())
    assert recorded["devices"][0]["memory_used"] == 61203283968
    with Nvml(FakePynvml(recorded)) as replayed:
        assert replayed.open().available
        assert (replayed.driver_version(), replayed.cuda_driver_version()) == ("550.54.15", "12.4")


def test_an_older_call_that_answers_is_recorded_under_the_newer_ones_key(recorder: ModuleType) -> None:
    fixture = _fixture()
    fixture["devices"][0]["not_supported"].append("nvmlDeviceGetEnforcedPowerLimit")
    older = FakePynvml(fixture)
    older.nvmlDeviceGetPowerManagementLimit = lambda handle: 350_000  # type: ignore[attr-defined]
    recorded = recorder.record(older, description="test")
    assert recorded["devices"][0]["power_limit_mw"] == 350_000
    assert "nvmlDeviceGetEnforcedPowerLimit" not in recorded["devices"][0]["not_supported"]
    assert _read(recorded)[1][0].power_limit_w == 350.0


class Spy:
    """Wraps a fake pynvml and notes the name of every NVML function called through it."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self.called: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._lib, name)
        if not name.startswith("nvml") or not callable(value):
            return value

        def call(*args: Any) -> Any:
            self.called.add(name)
            return value(*args)
        return call


def test_the_recorder_makes_every_call_the_reader_makes_that_the_fake_replays(recorder: ModuleType) -> None:
    """A call the fake has no answer for reads as not supported in any replay, so recording it would change nothing:
    a new metric needs no recorder change until the fake learns its call, and then this test asks for both."""
    replayable = {name for name in vars(FakePynvml) if name.startswith("nvml")}
    spy = Spy(FakePynvml(_fixture()))
    with Nvml(spy) as nvml:
        nvml.open()
        reader = GpuReader(nvml)
        for index in range(reader.count()):
            reader.sample(index)
        nvml.driver_version()
        nvml.cuda_driver_version()
    doctor = Spy(FakePynvml(_fixture("hw/nvml_degraded_pcie.json")))
    probe_driver_and_gpus(doctor)
    asked = (spy.called | doctor.called) & replayable
    assert asked and asked <= recorder.RECORDED_CALLS
    recording = Spy(FakePynvml(_fixture()))
    recorder.record(recording)  # type: ignore[arg-type]
    assert spy.called & replayable <= recording.called


def test_no_driver_is_one_error_line(recorder: ModuleType, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never.json"
    fake = FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert recorder.main([str(out)], lib=fake) == 1
    assert capsys.readouterr().err == "error: NVML did not open (NVML_ERROR_LIBRARY_NOT_FOUND)\n"
    assert not out.exists()


def test_a_gpu_lost_at_start_writes_nothing(recorder: ModuleType) -> None:
    with pytest.raises(recorder.RecordError, match="GPU 1 did not answer"):
        recorder.record(FakePynvml(_fixture(), lost=(1,)))
