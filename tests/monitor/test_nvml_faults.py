"""`top`, `top --json` and `watch` over a broken NVML binding: an exception that is not an NVMLError (a broken
pynvml, a driver being reloaded) in one field, in listing the GPUs or in nvmlInit never crashes them; the field
or GPU shows as unavailable with the reason, and sampling goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.hw import FIXTURE_ENV
from tests.fakes.nvml import FIXTURES

FAULTS = {
    "field": ("nvmlDeviceGetPowerUsage", "RuntimeError: driver is being reloaded"),
    "handle": ("nvmlDeviceGetHandleByIndex", "TypeError: bad argument type"),
    "listing": ("nvmlDeviceGetCount", "OSError: [Errno 5] Input/output error"),
    "init": ("nvmlInit", "AttributeError: module 'pynvml' has no attribute 'nvmlInit_v2'"),
}
"""Where the binding raises, and what; each of the four exception kinds once."""


def broken_machine(tmp_path: Path, where: str) -> dict[str, str]:
    """The recorded H100 + A100 machine, with the binding raising at ``where``; the environment to run it."""
    call, raised = FAULTS[where]
    fixture = json.loads((FIXTURES / "monitor" / "nvml_live.json").read_text()) | {"raises": {call: raised}}
    path = tmp_path / f"broken_{where}.json"
    path.write_text(json.dumps(fixture))
    return {FIXTURE_ENV: str(path)}


def reason(where: str) -> str:
    kind, _, message = FAULTS[where][1].partition(": ")
    return f"{kind} from the NVML binding: {message}"


def check_snapshot(data: dict, where: str) -> None:
    """One JSON snapshot shows the failure where it happened, with the reason."""
    if where == "field":
        assert [g["power_w"] for g in data["gpus"]] == [None, None]
        assert [g["unavailable"] for g in data["gpus"]] == [f"power_w: {reason(where)}"] * 2
        assert data["gpus"][0]["utilization_gpu_percent"] == 97, "the other fields are read"
    elif where == "handle":
        assert [(g["lost"], g["unavailable"]) for g in data["gpus"]] == [(True, reason(where))] * 2
    elif where == "listing":
        assert data["gpus"] == [] and data["gpu_status"] == f"NVML could not list the GPUs ({reason(where)})"
    else:
        assert data["gpus"] == [] and data["gpu_status"] == f"NVML failed to start ({reason(where)})"
    assert data["host"]["memory_total_bytes"] > 0


@pytest.mark.parametrize("where", FAULTS)
def test_top_json_shows_the_failure_with_its_reason(cli, tmp_path: Path, where: str) -> None:
    done = cli("top", "--once", "--json", env=broken_machine(tmp_path, where))
    assert done.code == 0, done.stderr
    check_snapshot(json.loads(done.stdout), where)


@pytest.mark.parametrize("where", FAULTS)
def test_top_once_shows_the_machine_without_a_traceback(cli, tmp_path: Path, where: str) -> None:
    done = cli("top", "--once", env=broken_machine(tmp_path, where))
    assert done.code == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr and "host  CPU" in done.stdout
    if where in ("listing", "init"):
        assert reason(where) in done.stderr


@pytest.mark.parametrize("where", FAULTS)
def test_watch_keeps_sampling_and_records_the_reason(cli, tmp_path: Path, where: str) -> None:
    done = cli("watch", "--count", "3", "--interval", "0.01", "--json", env=broken_machine(tmp_path, where))
    assert done.code == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 3
    for line in lines:
        check_snapshot(line, where)
