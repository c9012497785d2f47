"""What a user reads: figures in their display units, beside peaks where the catalog has them."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from gpufly.bench.compare import compare_runs
from gpufly.bench.results import BenchError, BenchResult, BenchRun, DeviceFacts
from gpufly.bench.run import measure_one
from gpufly.bench.timing import summarize
from gpufly.cli.bench import format_value, render_comparison, render_run, wrap_name
from tests.bench.fakes import FakeDevice, slow_benchmark


@pytest.mark.parametrize(("value", "unit", "shown"), [
    (1.082e11, "FLOP/s", "108.2 GFLOP/s"), (7.5e14, "FLOP/s", "750.0 TFLOP/s"), (1.5e15, "OP/s", "1,500 TOP/s"),
    (4.812e12, "B/s", "4,812 GB/s"), (2.5e10, "B/s", "25.0 GB/s"), (7.25e-6, "s", "7.25 µs"),
    (0.0123, "s", "12.3 ms"), (3.0, "s", "3.00 s"), (None, "B/s", "—"),
])
def test_values_in_display_units(value, unit, shown) -> None:
    assert format_value(value, unit) == shown


def _text(run: BenchRun) -> str:
    out = Console(width=160, color_system=None, record=True, file=io.StringIO())
    render_run(run, out)
    return out.export_text()


def test_a_gpu_run_shows_percent_of_peak(catalog) -> None:
    device = FakeDevice(spec=catalog.get("H100 SXM"))
    work = device.spec.bf16_tensor_tflops * 1e12 * 0.01 * 0.62
    result = measure_one(device, slow_benchmark(device, "gemm.bf16", 0.01, work))
    run = BenchRun(DeviceFacts(kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_id="h100-sxm", driver_version="550",
                               cuda_version="12.4", sm_clock_max_mhz=1980, power_limit_w=700.0),
                   "2026-01-01T00:00:00+00:00", results=[result],
                   errors=[BenchError("gemm.fp8", "gemm", "out of memory: tried to allocate 2 GiB")])
    text = _text(run)
    row = next(line for line in text.splitlines() if "gemm.bf16" in line)
    assert "613.4 TFLOP/s" in row and "989.4 TFLOP/s" in row and "62%" in row
    assert "driver 550, CUDA 12.4, SM 1980 MHz max, 700 W limit" in text
    assert "Not measured" in text and "out of memory" in text


def test_a_cpu_run_says_why_it_has_no_peaks() -> None:
    device = FakeDevice(kind="cpu")
    run = BenchRun(DeviceFacts(kind="cpu", name="AMD EPYC", cpu_model="AMD EPYC", cpu_threads=2),
                   "2026-01-01T00:00:00+00:00", results=[measure_one(device, slow_benchmark(device, "gemm.fp32", 0.01,
                                                                                           1e9, peak="fp32"))])
    text = _text(run)
    assert "% of peak" not in text and "the catalog has no CPUs" in text
    assert "100.0 GFLOP/s" in text and "CPU AMD EPYC, 2 threads" in text


def _figure(name: str, value: float, low: float, high: float, *, noisy: bool = False, unit: str = "FLOP/s",
            metric: str = "flops_per_s") -> BenchResult:
    timing = summarize([1.0, 1.0, 1.0], warmup=1)
    return BenchResult(name=name, group=name.split(".")[0], metric=metric, value=value, unit=unit,
                       params={"shape": "n=1536"}, timing=timing, value_low=low, value_high=high, noisy=noisy,
                       noise=("interval 31.0% of the median after 3 attempts (limit 10%); python (pid 123) at 95% "
                              "CPU; load average 1.9 on 2 cores") if noisy else None, attempts=3 if noisy else 1)


CPU = DeviceFacts(kind="cpu", name="Xeon", cpu_model="Xeon", cpu_threads=2)


def _at(width: int, render, *args) -> str:
    out = Console(width=width, color_system=None, record=True, file=io.StringIO())
    render(*args, out)
    return out.export_text()


def test_a_figure_shows_its_interval_and_a_noisy_one_says_why() -> None:
    swept = _figure("gemm.fp32", 412.3e9, 398.0e9, 421.5e9)
    swept.params["sweep"] = [{"size": n, "median_s": 1.0, "value": 1.0} for n in (512, 1024, 2048)]
    run = BenchRun(CPU, "2026-01-01T00:00:00+00:00", settings={"noise_limit": 0.1, "max_attempts": 3, "quick": True},
                   results=[swept,
                            _figure("gemm.bf16", 1.2e12, 0.9e12, 1.5e12, noisy=True)])
    text = _at(160, render_run, run)
    assert "412.3 GFLOP/s (398.0-421.5)" in text
    bf16 = next(line for line in text.splitlines() if "gemm.bf16" in line)
    assert "noisy [1]" in bf16
    assert "[1] gemm.bf16: interval 31.0% of the median after 3 attempts (limit 10%); python (pid 123) at 95% CPU" \
        in text
    flat = " ".join(text.split())
    assert "wider than 10% of the figure is measured again, up to 3 times, then marked noisy" in flat
    assert "gemm: the best median over a sweep of square sizes, n = 512 to 2048 (--quick: a shorter sweep" in flat


LONG = ("llm.fp32.decode.m16.k4096.n14336", "attention.fp32.s2048", "threads.gemm.fp32.t2")


def test_compare_fits_80_columns_without_breaking_a_name_mid_word() -> None:
    a = BenchRun(CPU, "2026-01-01T00:00:00+00:00", results=[_figure(n, 100e9, 98e9, 102e9) for n in LONG])
    b = BenchRun(CPU, "2026-01-02T00:00:00+00:00",
                 results=[_figure(n, 130e9, 126e9, 133e9, noisy=n == LONG[1]) for n in LONG])
    text = _at(80, render_comparison, compare_runs(a, b, "a.json", "b.json"))
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "…" not in text
    rule = next(i for i, line in enumerate(lines) if "───" in line)
    rows = lines[rule + 1:next(i for i, line in enumerate(lines) if i > rule and not line.strip())]
    pieces = [line[:22].strip() for line in rows if line[:22].strip()]
    assert "".join(pieces) == "".join(LONG)
    assert pieces == ["llm.fp32.decode.m16.", "k4096.n14336", "attention.fp32.s2048", "threads.gemm.fp32.t2"]
    row = next(line for line in lines if "threads.gemm.fp32.t2" in line)
    assert "1.30x" in row and "faster" in row
    row = next(line for line in lines if "attention.fp32.s2048" in line)
    assert "1.30x" in row and "noisy" in row and "[1]" in row
    assert "[1] attention.fp32.s2048: noisy in b" in text
    below = lines[lines.index(row) + 1]
    assert "98.0-102" in below and "126-133" in below and "1.24-1.36" in below


def test_compare_shows_why_a_difference_is_not_a_speedup_within_80_columns() -> None:
    a = _figure("gemm.int8", 2.18e12, 2.15e12, 2.2e12, unit="OP/s", metric="ops_per_s")
    b = _figure("gemm.int8", 3.88e12, 3.8e12, 3.9e12, unit="OP/s", metric="ops_per_s")
    a.params.update(shape="n=3072", sweep=[{"size": 2048, "median_s": 1, "value": 2e12},
                                           {"size": 3072, "median_s": 1, "value": 2.2e12}])
    b.params.update(shape="n=2048", sweep=[{"size": 2048, "median_s": 1, "value": 3.9e12},
                                           {"size": 3072, "median_s": 1, "value": 3.7e12}])
    text = _at(80, render_comparison, compare_runs(BenchRun(CPU, "a", results=[a]), BenchRun(CPU, "b", results=[b])))
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80 and "…" not in text
    row = next(i for i, line in enumerate(lines) if "gemm.int8" in line)
    assert "2.18" in lines[row] and "3.88" in lines[row] and "1.78x" in lines[row] and "faster" not in lines[row]
    assert "2.15-2.20" in lines[row + 1] and "3.80-3.90" in lines[row + 1] and "1.73-1.81" in lines[row + 1]
    assert "not" in lines[row] and "comparable" in " ".join(lines[row:row + 2])
    assert "[1] gemm.int8: not comparable: best sizes differ (3072 vs 2048)" in text


def test_names_wrap_after_dots() -> None:
    assert wrap_name("llm.fp32.decode.m16.k4096.n14336") == "llm.fp32.decode.m16.\nk4096.n14336"
    assert wrap_name("memory.copy") == "memory.copy"
    assert wrap_name("averyveryverylongsinglepartname") == "averyveryverylongsinglepartname"


def test_a_steady_figure_measured_beside_busy_processes_says_so() -> None:
    busy = dataclasses.replace(_figure("gemm.fp32", 33.6e9, 33.5e9, 33.7e9), conditions={
        "start": {"busy_processes": [{"pid": 7, "name": "pytest", "cpu_percent": 96.0}]}, "end": {}})
    text = _at(160, render_run, BenchRun(CPU, "2026-01-01T00:00:00+00:00", results=[busy]))
    row = next(line for line in text.splitlines() if "gemm.fp32" in line)
    assert "others busy" in row and "noisy" not in row
    assert "a steady figure can still be low" in text


def test_compare_at_80_columns_wraps_a_verdict_between_words_never_inside_one() -> None:
    # the probe's runs: gemm.fp16 measured at different best sizes, gemm.bf16 beside a busy process in b
    fp16_a = _figure("gemm.fp16", 278.7e9, 275e9, 284e9)
    fp16_b = _figure("gemm.fp16", 270.8e9, 258e9, 274e9)
    fp16_a.params.update(shape="n=2048", sweep=[{"size": 2048, "median_s": 1, "value": 280e9}])
    fp16_b.params.update(shape="n=3072", sweep=[{"size": 3072, "median_s": 1, "value": 271e9}])
    bf16_a = _figure("gemm.bf16", 1.68e12, 1.67e12, 1.73e12)
    bf16_b = dataclasses.replace(_figure("gemm.bf16", 0.66e12, 0.64e12, 0.69e12), conditions={
        "start": {"busy_processes": [{"pid": 13550, "name": "python", "cpu_percent": 101.0}]}})
    names = ("llm.fp32.decode.m16.k4096.n14336", "attention.fp32.s512", "launch.op_dispatch")
    rest_a = [_figure(n, 10.4e9, 10.1e9, 11.3e9, noisy=True) for n in names]
    rest_b = [_figure(n, 11.4e9, 11.0e9, 11.7e9) for n in names]
    copy = _figure("threads.copy.t1", 10.9e9, 10.6e9, 11.1e9, unit="B/s", metric="bytes_per_s")
    copy_b = _figure("threads.copy.t1", 10.0e9, 9.89e9, 10.6e9, unit="B/s", metric="bytes_per_s")
    a = BenchRun(CPU, "a", results=[fp16_a, bf16_a, *rest_a, copy])
    b = BenchRun(CPU, "b", results=[fp16_b, bf16_b, *rest_b, copy_b])
    text = _at(80, render_comparison, compare_runs(a, b, "b1.json", "b2.json"))
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80 and "…" not in text
    header = next(line for line in lines if line.lstrip().startswith("benchmark"))
    start, end = header.index("verdict"), header.index("note")
    rule = next(i for i, line in enumerate(lines) if "───" in line)
    table = lines[rule + 1:next(i for i, line in enumerate(lines) if i > rule and not line.strip())]
    words = [word for line in table for word in line[start:end].split()]
    allowed = {"faster", "slower", "within", "noise", "noisy", "not", "comparable", "disturbed", "the", "sweep's",
               "spread", "no", "interval"}
    assert words and set(words) <= allowed, words
    bf16 = next(i for i, line in enumerate(table) if line.startswith("gemm.bf16"))
    assert "disturbed" in table[bf16] and "slower" not in table[bf16]
    fp16 = next(i for i, line in enumerate(table) if line.startswith("gemm.fp16"))
    assert table[fp16][start:end].split() == ["not"] and table[fp16 + 1][start:end].split() == ["comparable"]
    assert "[2] gemm.bf16: other processes busy during b" in text
    assert "disturbed: other processes were busy during a steady figure" in " ".join(text.split())
