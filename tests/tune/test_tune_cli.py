"""`gpufly tune` from the shell: a user's workload, the results file, --resume, and clear loading errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TINY = Path(__file__).parent.parent / "fixtures" / "tune" / "tiny.py"


@pytest.mark.slow
def test_a_user_workload_is_tuned_and_resumed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "trials.jsonl"
    page = tmp_path / "tune.html"
    first = cli("tune", f"{TINY}:workload", "--steps", "16", "--results", str(results), "--html", str(page), "--json")
    assert first.code == 0, first.stderr
    document = json.loads(first.stdout)
    names = [t["configuration"] for t in document["trials"]]
    assert names[:4] == ["baseline", "num_workers=2", "batch_size=128", "amp=bf16"]
    assert {"optimizer_impl=foreach", "optimizer_impl=fused"} <= set(names)
    bars = page.read_text().count('class="trial"')
    assert bars == sum(t["speedup"] is not None for t in document["trials"]) and bars >= 4
    assert all(t["status"] in ("ok", "unsafe") for t in document["trials"])
    assert document["trials"][0]["speedup"] == 1.0 and document["best"] is not None
    assert len(results.read_text().splitlines()) == len(names) + 1
    again = cli("tune", f"{TINY}:workload", "--steps", "16", "--results", str(results))
    assert again.code == 2 and "already holds trial results" in again.stderr and "--resume" in again.stderr
    resumed = cli("tune", f"{TINY}:workload", "--steps", "16", "--results", str(results), "--resume", "--json")
    assert resumed.code == 0
    assert len(results.read_text().splitlines()) == len(names) + 1, "every trial came from the file"
    cross = cli("tune", "cnn", "--steps", "16", "--results", str(results), "--resume")
    assert cross.code == 2 and "holds another run's trials" in cross.stderr and "workload" in cross.stderr
    assert "Traceback" not in cross.stderr and "hint:" in cross.stderr
    fewer = cli("tune", f"{TINY}:workload", "--steps", "8", "--results", str(results), "--resume")
    assert fewer.code == 2 and "steps 16 there, 8 here" in fewer.stderr
    assert len(results.read_text().splitlines()) == len(names) + 1, "a header, then one line per trial"
    report = cli("report", "--tune", str(results))
    assert report.code == 0 and f"tune: {len(names)} trials; best safe" in report.stdout
    missing = cli("report", "--tune", str(tmp_path / "none.jsonl"))
    assert missing.code == 2 and "no tune results" in missing.stderr


@pytest.mark.parametrize(("target", "message"), [
    ("nosuchthing", "unknown workload 'nosuchthing'"),
    ("no_such_module_abc:make", "module not found: no_such_module_abc"),
    (f"{TINY}:missing", "has no function 'missing'"),
    ("{tmp}/absent.py:make", "no such file"),
])
def test_workload_loading_errors_are_one_line(cli, tmp_path: Path, target: str, message: str) -> None:  # type: ignore[no-untyped-def]
    result = cli("tune", target.format(tmp=tmp_path), "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 2 and message in result.stderr, result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(("source", "message"), [
    ("def make():\n    return 42\n", "returned int, not a Workload"),
    ("def make(:\n    pass\n", "has a syntax error: invalid syntax"),
    ("import no_such_module_xyz\ndef make(): pass\n", "No module named 'no_such_module_xyz'"),
    ("def make(options):\n    raise RuntimeError('boom')\n", "failed to build: RuntimeError: boom"),
    ("import sys\ndef make(options):\n    sys.exit(9)\n", "make called sys.exit(9)"),
    ("import os\ndef make(options):\n    os._exit(5)\n", "make ended its process with exit code 5 before it answered"),
    ("def make(options):\n    raise KeyboardInterrupt\n", "make raised KeyboardInterrupt"),
    ("import ctypes\ndef make(options):\n    ctypes.string_at(0)\n", "make crashed the process it ran in (SIGSEGV)"),
    ("import sys\nsys.exit(3)\n", "make called sys.exit(3)"),
], ids=["not-a-workload", "syntax", "importing", "raising", "sys.exit", "os._exit", "interrupt", "segfault",
        "exit-on-import"])
def test_a_broken_workload_file_is_a_two_line_error(cli, tmp_path: Path, source: str, message: str) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken.py"
    broken.write_text(source)
    result = cli("tune", f"{broken}:make", "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 2, result.stderr


def test_a_workload_that_hangs_while_it_builds_is_stopped_at_the_trials_timeout(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    hanging = tmp_path / "hanging.py"
    hanging.write_text("import time\ndef make(options):\n    time.sleep(600)\n")
    result = cli("tune", f"{hanging}:make", "--timeout", "0.5", "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 2, result.stderr
    assert f"the workload {hanging}:make did not finish within 0.5 s, and was stopped" in result.stderr
    assert "--timeout" in result.stderr and not (tmp_path / "r.jsonl").exists()


def test_a_syntax_error_points_at_the_line_and_how_to_see_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def make(:\n    pass\n")
    result = cli("tune", f"{syntax}:make", "--results", str(tmp_path / "s.jsonl"))
    assert "syntax.py, line 1" in result.stderr and "py_compile" in result.stderr, "its own hint: where to look"


@pytest.mark.parametrize(("args", "message"), [
    (["cnn", "--task", "serve"], "--task is train or infer"),
    (["recsys", "--task", "infer", "--ddp", "2"], "takes neither --ddp"),
    (["--device", "tpu"], "--device is auto, cuda or cpu"),
])
def test_task_and_device_are_checked(cli, tmp_path: Path, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    argv = args if args[0] != "--device" else ["cnn", *args]
    result = cli("tune", *argv, "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 2 and message in result.stderr and "hint:" in result.stderr, result.stderr


def test_an_html_path_in_no_folder_is_refused_before_any_trial(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "r.jsonl"
    result = cli("tune", f"{TINY}:workload", "--results", str(results), "--html", str(tmp_path / "no" / "t.html"))
    assert result.code == 2 and "is not a folder" in result.stderr and "Traceback" not in result.stderr
    assert not results.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--results", "/proc/nope/r.jsonl"], "/proc/nope is not a folder"),
    (["--results", "{folder}"], "is a folder"),
    (["--results", "{folder}", "--resume"], "is a folder"),
    (["--budget-minutes", "nan"], "--budget-minutes must be a positive number"),
    (["--budget-minutes", "inf"], "--budget-minutes must be a positive number"),
    (["--timeout", "nan"], "--timeout must be a positive number"),
    (["--ddp", "-1"], "--ddp is a process count"),
    (["--ddp", "1"], "--ddp 1 is one process, which is no DDP"),
    (["--steps", "2"], "--steps must be at least 4"),
])
def test_bad_results_paths_and_numbers_are_refused_before_any_trial(cli, tmp_path: Path, args: list[str],  # type: ignore[no-untyped-def]
                                                                    message: str) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    argv = ["tune", f"{TINY}:workload", *(arg.format(folder=folder) for arg in args)]
    if "--results" not in args:
        argv += ["--results", str(tmp_path / "r.jsonl")]
    result = cli(*argv)
    assert result.code == 2 and message in result.stderr, result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r.jsonl").exists() and not any(folder.iterdir())


def test_an_existing_results_file_needs_resume(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "r.jsonl"
    results.write_text("")
    result = cli("tune", f"{TINY}:workload", "--results", str(results))
    assert result.code == 2 and "already holds trial results" in result.stderr and "--resume" in result.stderr


def test_resuming_another_run_s_file_is_refused_before_any_trial(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpufly.tune import ResultsLog, run_identity

    results = tmp_path / "r.jsonl"
    ResultsLog(results).start(run_identity(f"{TINY}:workload", "train", 16, "cpu", "2.13"))
    cross = cli("tune", "cnn", "--steps", "16", "--results", str(results), "--resume", "--device", "cpu")
    assert cross.code == 2 and "holds another run's trials" in cross.stderr and "workload" in cross.stderr
    assert "Traceback" not in cross.stderr and "hint:" in cross.stderr
    assert len(results.read_text().splitlines()) == 1, "nothing was added"


def test_the_help_names_the_builtins_and_the_forms_of_a_user_workload(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("tune", "--help")
    text = " ".join(result.stdout.split())
    assert result.code == 0
    assert all(word in text for word in ("cnn", "transformer", "recsys", "module:function", "file.py:function"))


@pytest.mark.slow
def test_tune_recsys_runs_the_case_study_stages(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results, page = tmp_path / "stages.jsonl", tmp_path / "stages.html"
    run = cli("tune", "recsys", "--steps", "40", "--results", str(results), "--price-per-hour", "2",
              "--html", str(page), "--json", timeout=300)
    assert run.code == 0, run.stderr
    document = json.loads(run.stdout)
    assert document["mode"] == "stages" and document["price_per_hour"] == 2.0
    rows = document["trials"]
    assert [r["stage"] for r in rows] == ["baseline", "data", "compute", "compute", "compute", "data",
                                          "communication"]
    assert rows[0]["speedup"] == 1.0 and rows[0]["held_out_loss"] is not None
    assert rows[2]["knobs"] == {"batched": True, "sparse": True}, "cumulative"
    assert rows[-1]["knobs"]["ddp"] == 2
    assert rows[-1]["status"] == "ok" and rows[-1]["world_size"] == 2, rows[-1]
    assert rows[4]["knobs"]["batch_size"] == 2048 and rows[4]["status"] == "unsafe", "lr x4 at batch 2048 drifts"
    assert all("batch_size" not in r["knobs"] for r in rows[5:]), "an unsafe stage is not carried forward"
    for r in rows:
        if r["throughput"] is not None:
            assert r["samples_per_dollar"] == pytest.approx(r["throughput"] * 3600 / 2)
    assert document["best"] is not None and page.read_text().count('class="trial"') >= 4
    assert len(results.read_text().splitlines()) == len(rows) + 1
    text = cli("tune", "recsys", "--steps", "40", "--results", str(results), "--resume", "--price-per-hour", "2")
    assert text.code == 0, text.stderr
    assert "samples/$" in text.stdout and "best safe stage" in text.stdout and "communication" in text.stdout
    assert len(results.read_text().splitlines()) == len(rows) + 1, "resumed from the file"


@pytest.mark.parametrize(("args", "message"), [
    (["recsys", "--steps", "20"], "the recsys stages need --steps 40 or more"),
    (["recsys", "--budget-minutes", "5"], "--budget-minutes applies to a search"),
    (["cnn", "--search"], "--search is for recsys"),
    (["cnn", "--price-per-hour", "2"], "--price-per-hour prices the recsys case study"),
    (["recsys", "--price-per-hour", "-1"], "--price-per-hour must be a positive number of USD"),
])
def test_options_one_kind_of_run_reads_are_refused_for_the_other(cli, args: list[str], message: str) -> None:
    result = cli("tune", *args)
    assert result.code == 2 and message in result.stderr and "hint:" in result.stderr, result.stderr


def test_an_html_path_that_is_a_folder_is_refused_before_any_trial(cli, tmp_path: Path) -> None:
    result = cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--html", str(tmp_path))
    assert result.code == 2 and "is a folder" in result.stderr
    assert not (tmp_path / "r.jsonl").exists(), "no trial ran"


def test_json_output_writes_a_diverged_loss_as_null() -> None:
    from gpufly.cli.render import finite

    assert json.loads(json.dumps(finite({"loss_drift": float("inf"), "x": [float("nan"), 1.5]}), allow_nan=False)) \
        == {"loss_drift": None, "x": [None, 1.5]}


def test_report_tune_says_why_a_file_has_no_best_trial(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpufly.tune import ResultsLog, TrialResult

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = cli("report", "--tune", str(empty))
    assert result.code == 2 and "holds no tune trials" in result.stderr and "hint:" in result.stderr
    failed = tmp_path / "failed.jsonl"
    ResultsLog(failed).append(TrialResult("baseline", {}, "oom", error="CUDA out of memory"))
    result = cli("report", "--tune", str(failed))
    assert result.code == 2 and "none is safe (1 oom)" in result.stderr
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe")
    result = cli("report", "--tune", str(binary))
    assert result.code == 2 and "--results FILE" in result.stderr and "give --results" not in result.stderr


def test_report_tune_reads_a_file_an_earlier_gpufly_wrote(cli) -> None:  # type: ignore[no-untyped-def]
    old = Path(__file__).parent.parent / "fixtures" / "tune" / "results-v1.jsonl"
    result = cli("report", "--tune", str(old))
    assert result.code == 0, result.stderr
    assert "tune: 4 trials; best safe channels_last=True at 1.50x" in result.stdout


@pytest.mark.slow
def test_a_run_whose_baseline_fails_exits_1_with_the_reason(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("tune", f"{TINY}:failing_loss", "--steps", "8", "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 1
    assert "RuntimeError: the loss fails on purpose" in result.stdout
    assert "the baseline itself failed" in result.stdout
