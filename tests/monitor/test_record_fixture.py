"""scripts/record_nvml_fixture.py writes what the fake pynvml reads: recording the fake gives back its fixture."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml
import pytest

from gpufly.monitor.backends.nvml import Nvml
from tests.fakes.pynvml_fake import FIXTURES, FakePynvml

SCRIPT = Path(__file__).parent.parent.parent / "scripts" / "record_nvml_fixture.py"


@pytest.fixture(scope="module")
def recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_nvml_fixture", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fixture() -> dict[str, Any]:
    return json.loads((FIXTURES / "nvml_two_gpus.json").read_text())


def _answered(fixture: dict[str, Any], recorder: ModuleType) -> dict[str, Any]:
    """The fixture less the values behind its not-supported calls, which the fake never gives out.

    The hand-written nvml_two_gpus.json keeps a pci_bus_id for a GPU whose nvmlDeviceGetPciInfo is not
    supported; no recording can see such a value, so the round trip compares what the fake answers.
    """
    keys = {call: names for call, names, _ in recorder.DEVICE_CALLS}
    answered = json.loads(json.dumps(fixture))
    for device in answered["devices"]:
        for call in device["not_supported"]:
            for key in keys[call]:
                device.pop(key, None)
    return answered


def test_recording_the_fake_gives_back_the_fixture_it_was_fed(recorder: ModuleType) -> None:
    fixture = _fixture()
    warnings: list[str] = []
    recorded = recorder.record(FakePynvml(fixture), description=fixture["description"], warn=warnings.append)
    assert recorded == _answered(fixture, recorder)
    assert recorded["devices"][0] == fixture["devices"][0], "a fully supported GPU comes back as it went in"
    assert warnings == []
    again = recorder.record(FakePynvml(json.loads(json.dumps(recorded))), description=fixture["description"])
    assert again == recorded, "a recording records back to itself exactly"


def test_a_recording_replays_as_the_same_devices(recorder: ModuleType, tmp_path: Path) -> None:
    fixture = _fixture()
    fixture["devices"][0]["memory_used"] = 2 * 1024**3
    out = tmp_path / "recorded.json"
    assert recorder.main([str(out), "--description", "test"], lib=FakePynvml(json.loads(json.dumps(fixture)))) == 0
    recorded = json.loads(out.read_text())
    assert recorded["devices"][0]["memory_used"] == 2 * 1024**3
    with Nvml(FakePynvml(fixture)) as original, Nvml(FakePynvml(recorded)) as replayed:
        assert original.open().available and replayed.open().available
        assert replayed.devices() == original.devices()
        assert (replayed.driver_version(), replayed.cuda_driver_version()) == ("550.54.15", "12.4")


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


def test_the_recorder_makes_every_call_the_backend_makes(recorder: ModuleType) -> None:
    spy = Spy(FakePynvml(_fixture()))
    with Nvml(spy) as nvml:  # type: ignore[arg-type]
        nvml.open()
        nvml.devices()
        nvml.driver_version()
        nvml.cuda_driver_version()
    assert spy.called and spy.called <= recorder.RECORDED_CALLS
    recording = Spy(FakePynvml(_fixture()))
    recorder.record(recording)  # type: ignore[arg-type]
    assert spy.called <= recording.called


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
