"""The --deep smoke test: its child-process plumbing on CPU, the real thing on a GPU."""

from __future__ import annotations

import json
import sys

import pytest

from gpufly.doctor.smoke import SmokeResult, run_isolated


def _fake_python(tmp_path, body: str) -> str:
    script = tmp_path / "fake_python"
    script.write_text(f"#!{sys.executable}\nimport sys, json, time\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_results_are_read_from_the_child(tmp_path) -> None:
    line = json.dumps(SmokeResult(0, "NVIDIA L4", "bfloat16", 4e-3, True, 95.0).to_dict())
    results, error = run_isolated(python=_fake_python(tmp_path, f"print({line!r})"))
    assert error is None and results == [SmokeResult(0, "NVIDIA L4", "bfloat16", 4e-3, True, 95.0)]


@pytest.mark.parametrize("body, message", [
    ("sys.exit(3)", "failed (exit 3)"),
    ("time.sleep(5)", "did not finish within 1 s"),
    ("print('Segmentation fault? no, just noise')", "printed something unexpected"),
])
def test_a_failing_child_becomes_an_error_not_a_crash(tmp_path, body: str, message: str) -> None:
    results, error = run_isolated(timeout=1, python=_fake_python(tmp_path, body))
    assert results == [] and message in error


@pytest.mark.gpu
def test_every_gpu_computes_correctly() -> None:
    results, error = run_isolated()
    assert error is None and results
    for result in results:
        assert result.ok, result
        assert result.tflops and result.tflops > 1
