"""`gpufly bench` as a user runs it: the table, --json, --save, --only, --compare and clean errors.

The CliRunner tests drive the command in a small Typer app; the `cli` tests run `python -m gpufly`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpufly.bench.results import SCHEMA_VERSION, load_run
from gpufly.cli import bench as bench_cli
from gpufly.errors import GpuflyError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "bench"
ONE, TWO = FIXTURES / "cpu_quick_1thread.json", FIXTURES / "cpu_quick_2threads.json"


@pytest.fixture(scope="module")
def invoke():
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(name="bench")(bench_cli.bench)
    app.command(name="other")(lambda: None)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["bench", *args], env={"COLUMNS": "160"})


def test_compare_prints_both_runs_side_by_side(invoke) -> None:
    result = invoke("--compare", str(ONE), str(TWO))
    assert result.exit_code == 0, result.output
    assert "1 thread;" in result.output and "2 threads;" in result.output
    gemm = next(line for line in result.output.splitlines() if line.strip().startswith("gemm.fp32"))
    one, two = load_run(ONE).result("gemm.fp32").value, load_run(TWO).result("gemm.fp32").value
    assert f"{two / one:.2f}x" in gemm and "GFLOP/s" in gemm and "no interval" in gemm
    assert "threads.gemm.fp32.t2: only in b" in result.output


def test_compare_json_has_a_stable_shape(invoke) -> None:
    result = invoke("--compare", str(ONE), str(TWO), "--json")
    data = json.loads(result.output)
    assert data["schema_version"] == bench_cli.SCHEMA_VERSION == 4
    assert data["a"]["file"] == str(ONE) and data["b"]["device"]["cpu_threads"] == 2
    row = next(r for r in data["rows"] if r["name"] == "memory.copy")
    assert set(row) == {"name", "metric", "unit", "a", "b", "ratio_b_over_a", "b_speedup", "higher_is_better",
                        "a_interval", "b_interval", "b_speedup_range", "sweep_spread", "busy", "verdict", "note"}
    assert row["ratio_b_over_a"] == pytest.approx(row["b"] / row["a"])
    assert row["verdict"] == "no interval" and row["a_interval"] is None


def test_compare_refuses_a_file_that_is_not_a_run(invoke, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 99, "kind": "gpufly.bench"}')
    result = invoke("--compare", str(ONE), str(bad))
    assert isinstance(result.exception, GpuflyError) and "schema_version 99" in result.exception.message


def test_compare_needs_two_files(invoke) -> None:
    assert invoke("--compare", str(ONE)).exit_code == 2


@pytest.mark.parametrize(("args", "ignored"), [
    (("--quick",), "--quick ignored"), (("--only", "gemm"), "--only ignored"),
    (("--quick", "--only", "gemm", "--device", "cpu"), "--device, --quick, --only ignored"),
])
def test_compare_notes_every_measuring_option_it_ignores(args, ignored) -> None:
    runner = CliRunner()
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(name="bench")(bench_cli.bench)
    app.command(name="other")(lambda: None)
    for order in (("--compare", str(ONE), str(TWO), *args), (*args, "--compare", str(ONE), str(TWO))):
        result = runner.invoke(app, ["bench", *order], env={"COLUMNS": "160"})
        assert result.exit_code == 0, result.output
        assert f"note: --compare measures nothing; {ignored}" in result.stderr


def test_a_selection_this_device_cannot_run_is_refused_and_the_saved_file_kept(cli, tmp_path: Path) -> None:
    save = tmp_path / "keep.json"
    save.write_bytes(TWO.read_bytes())
    hints = []
    for only, message in (("gemm.fp8", "error: --only gemm.fp8: not measurable on this device: fp8 matmul"),
                          ("gemm.fp8,memory", "error: --only gemm.fp8: not measurable on this device"),
                          ("transfer", "error: --only transfer: nothing this device can measure (transfer: the "
                                       "transfer benchmarks need a CUDA GPU)")):
        result = cli("bench", "--device", "cpu", "--quick", "--only", only, "--save", str(save))
        assert result.code == 2 and result.stdout == "" and "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith(message) and lines[1].startswith("hint: "), lines
        assert save.read_bytes() == TWO.read_bytes(), "the file a refused run would have replaced is kept"
        hints.append(lines[1])
    assert hints[0] == "hint: the gemm benchmarks this device runs: gemm.fp32, gemm.bf16, gemm.fp16, gemm.int8"


def test_a_quick_cpu_run_prints_the_table_and_saves(invoke, tmp_path: Path) -> None:
    save = tmp_path / "run.json"
    result = invoke("--device", "cpu", "--quick", "--only", "launch,transfer", "--save", str(save))
    assert result.exit_code == 0, result.output
    assert "launch.op_dispatch" in result.output and "µs (" in result.output
    assert "the catalog has no CPUs" in result.output
    assert "Not measured" in result.output and "need a CUDA GPU" in result.output
    saved = load_run(save)
    assert [r.name for r in saved.results] == ["launch.op_dispatch"]
    assert saved.settings["only"] == ["launch", "transfer"] and saved.settings["quick"] is True
    assert saved.settings["noise_limit"] == 0.1 and saved.settings["max_attempts"] == 3
    figure = saved.results[0]
    assert figure.value_low <= figure.value <= figure.value_high
    assert {"load_average_1m", "busy_processes"} <= set(figure.conditions["end"])


def test_json_is_the_saved_shape(invoke) -> None:
    result = invoke("--device", "cpu", "--quick", "--only", "launch", "--json")
    data = json.loads(result.output)
    assert data["schema_version"] == SCHEMA_VERSION and data["device"]["kind"] == "cpu"
    assert [r["name"] for r in data["results"]] == ["launch.op_dispatch"]


@pytest.mark.parametrize(("args", "message"), [
    (("--only", "gem"), "did you mean gemm"),
    (("--device", "tpu"), "unknown device"),
    (("--device", "cuda:0"), "no CUDA GPU"),
])
def test_bad_choices_are_errors_with_hints(invoke, args, message) -> None:
    result = invoke(*args)
    assert isinstance(result.exception, GpuflyError) and message in result.exception.message


def test_bench_through_python_m_gpufly(cli, tmp_path: Path) -> None:
    save = tmp_path / "run.json"
    result = cli("bench", "--device", "cpu", "--quick", "--only", "launch", "--json", "--save", str(save))
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["name"] == "launch.op_dispatch"
    assert load_run(save).results[0].name == "launch.op_dispatch"


def test_compare_through_python_m_gpufly(cli) -> None:
    result = cli("bench", "--compare", str(ONE), str(TWO))
    assert result.code == 0, result.stderr
    assert "gemm.fp32" in result.stdout and "b vs a" in result.stdout


def test_errors_through_python_m_gpufly(cli, tmp_path: Path) -> None:
    missing = cli("bench", "--compare", str(ONE), str(tmp_path / "none.json"))
    assert missing.code == 2 and "error: cannot read" in missing.stderr and "Traceback" not in missing.stderr
    unknown = cli("bench", "--only", "atention")
    assert unknown.code == 2 and "did you mean attention" in unknown.stderr


def test_a_typo_in_a_benchmark_name_is_one_error_before_anything_is_measured(cli) -> None:
    result = cli("bench", "--device", "cpu", "--quick", "--only", "gemm.fp33")
    assert result.code == 2 and result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: --only gemm.fp33: no such benchmark on this device",
                     "hint: did you mean gemm.fp32, gemm.fp8, gemm.fp16?"], lines


def test_an_unwritable_save_path_is_one_error_with_a_hint_before_anything_is_measured(cli, tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    for path in (tmp_path / "a_file" / "run.json", tmp_path):  # under a file; a folder
        result = cli("bench", "--device", "cpu", "--quick", "--only", "launch", "--save", str(path))
        assert result.code == 2 and "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert lines[0].startswith(("error: cannot write --save", "error: --save")) and str(path) in lines[0], lines
        assert lines[1].startswith("hint: "), lines
