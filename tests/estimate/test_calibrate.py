"""`gpufly fit --calibrate`: measured ceilings replace datasheet figures, scaled by the typical share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.bench.results import BenchRun
from gpufly.errors import GpuflyError
from gpufly.estimate.calibrate import TYPICAL_COPY_SHARE, TYPICAL_GEMM_SHARE, calibrated_gpu

FIXTURE = Path(__file__).parent.parent / "fixtures" / "bench" / "cpu_quick_2threads.json"


def gpu_run(bf16_flops: float, copy_bytes_s: float) -> dict:
    """The recorded CPU run, relabelled as an RTX 4090 run holding two measured figures."""
    data = json.loads(FIXTURE.read_text())
    data["device"].update(kind="cuda", name="NVIDIA GeForce RTX 4090", catalog_id="rtx-4090", index=0)
    template = data["results"][0]
    data["results"] = [{**template, "name": "gemm.bf16", "value": bf16_flops},
                       {**template, "name": "memory.copy", "group": "memory", "unit": "B/s", "value": copy_bytes_s}]
    return data


def test_a_throttled_card_is_scaled_down(catalog) -> None:
    rtx4090 = catalog.get("4090")
    run = BenchRun.from_dict(gpu_run(0.5 * TYPICAL_GEMM_SHARE * 165.2e12, 0.5 * TYPICAL_COPY_SHARE * 1008e9))
    calibrated, notes = calibrated_gpu(rtx4090, run)
    assert calibrated.bf16_tensor_tflops == pytest.approx(165.2 / 2)
    assert calibrated.memory_bandwidth_gbps == pytest.approx(1008 / 2)
    assert calibrated.fp16_tensor_tflops == rtx4090.fp16_tensor_tflops, "unmeasured figures stay"
    assert len(notes) == 2


def test_cpu_results_and_other_cards_are_refused(catalog) -> None:
    cpu = BenchRun.from_dict(json.loads(FIXTURE.read_text()))
    with pytest.raises(GpuflyError, match="measured on a CPU"):
        calibrated_gpu(catalog.get("4090"), cpu)
    with pytest.raises(GpuflyError, match="not the H100 SXM") as raised:
        calibrated_gpu(catalog.get("h100 sxm"), BenchRun.from_dict(gpu_run(1e14, 9e11)))
    assert "--gpu rtx-4090 predicts for the card measured" in (raised.value.hint or ""), "right with or without --gpu"


def test_fit_predicts_from_the_measured_card(cli, tmp_path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(gpu_run(0.5 * TYPICAL_GEMM_SHARE * 165.2e12, 0.5 * TYPICAL_COPY_SHARE * 1008e9)))
    args = ("fit", "llama-3.1-8b", "--gpu", "4090", "--engine", "llama.cpp", "--quant", "f16", "--json")
    datasheet = json.loads(cli(*args).stdout)["results"][0]["speed"]["decode_tok_s"]
    measured = json.loads(cli(*args, "--calibrate", str(path)).stdout)["results"][0]["speed"]["decode_tok_s"]
    assert measured < 0.6 * datasheet


@pytest.mark.parametrize(("change", "message"), [
    (lambda data: data["device"].update(catalog_id=4090), "device.catalog_id must be a string, got 4090"),
    (lambda data: data["results"][0].update(value="fast"), 'results[0].value must be a number, got "fast"'),
    (lambda data: data["results"][0].update(value=float("inf")), "results[0].value is not valid"),
    (lambda data: data["results"][0].update(value=None), "results[0].value must be a number, got null"),
])
def test_a_bench_file_with_a_wrong_field_is_one_error_naming_it(cli, tmp_path: Path, change, message: str) -> None:
    data = gpu_run(1e14, 9e11)
    change(data)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    result = cli("fit", "llama-3.1-8b", "--gpu", "4090", "--calibrate", str(path))
    lines = result.stderr.strip().splitlines()
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 2 and message in lines[0] and lines[1].startswith("hint: "), lines


def test_a_run_whose_figures_are_all_zero_calibrates_nothing(catalog) -> None:
    with pytest.raises(GpuflyError, match="no GEMM or memory figure"):
        calibrated_gpu(catalog.get("4090"), BenchRun.from_dict(gpu_run(0.0, 0.0)))


def test_a_healthy_card_keeps_its_datasheet_and_its_own_ceiling_is_the_share(catalog) -> None:
    """An A100 SXM's published matmul ceiling is 86.9% of its 312 TFLOPS: a run at that ceiling is a healthy card,
    not a card 16% faster than its datasheet (which 0.75 made it), and nothing measured lifts a figure above it."""
    a100 = catalog.get("a100-sxm4-80gb")
    data = gpu_run(0.869 * 312e12, 1.2 * TYPICAL_COPY_SHARE * a100.memory_bandwidth_gbps * 1e9)
    data["device"].update(name="NVIDIA A100-SXM4-80GB", catalog_id=a100.id)
    calibrated, notes = calibrated_gpu(a100, BenchRun.from_dict(data))
    assert calibrated.bf16_tensor_tflops == pytest.approx(312)
    assert calibrated.memory_bandwidth_gbps == a100.memory_bandwidth_gbps
    assert all("datasheet is kept" in note for note in notes), notes
    half = gpu_run(0.5 * 0.869 * 312e12, 9e11)
    half["device"].update(name="NVIDIA A100-SXM4-80GB", catalog_id=a100.id)
    assert calibrated_gpu(a100, BenchRun.from_dict(half))[0].bf16_tensor_tflops == pytest.approx(156)


def test_a_range_says_narrowed_only_where_the_measurement_narrowed_it(catalog) -> None:
    """The A100 family has its own training rows: a calibrated A100 keeps that band, and its basis must not claim a
    narrowing the CLI then prints as 0%."""
    from gpufly.estimate.job import Job
    from gpufly.estimate.ranges import band_for, where
    from gpufly.models.resolve import load_model

    model, a100 = load_model("qwen2.5-1.5b"), catalog.get("a100-sxm4-80gb")
    job = Job.from_options(model, task="full")
    plain = band_for(where("training throughput", model, a100, job))
    measured = band_for(where("training throughput", model, a100, job, calibrated=True))
    assert measured[:2] == pytest.approx(plain[:2]) and measured[2].narrowed == ""
