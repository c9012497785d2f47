"""`gpufly tune` from the shell: a user's workload, the results file, --resume, and clear loading errors."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpufly.tune import ResultsLog
from tests.tune.fakes import FakeMachine

TINY = Path(__file__).parent.parent / "fixtures" / "tune" / "tiny.py"


def column_text(out: str, column: int, edge: str = "│") -> str:
    """One column of a table the CLI printed, its cells' lines joined by spaces in order: a cell that wraps reads
    whole again (columns counted from 0; -1 is the last; ``edge="┃"`` reads the header)."""
    cells = [line.split(edge)[1:-1] for line in out.splitlines() if line.startswith(edge)]
    return " ".join(" ".join(row[column].split()) for row in cells if row and row[column].strip())


@pytest.mark.slow
def test_a_user_workload_is_tuned_and_resumed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "trials.jsonl"
    page = tmp_path / "tune.html"
    first = cli("tune", f"{TINY}:workload", "--steps", "16", "--results", str(results), "--html", str(page), "--json")
    assert first.code == 0, first.stderr
    document = json.loads(first.stdout)
    names = [t["configuration"] for t in document["trials"]]
    assert names[:2] == ["baseline", "baseline (seed 1)"]
    tried = {"num_workers=2", "batch_size=128", "amp=bf16", "optimizer_impl=foreach", "optimizer_impl=fused"}
    assert tried <= set(names)
    bars = page.read_text().count('class="trial"')
    assert bars == sum(t["speedup"] is not None for t in document["trials"]) and bars >= 4
    assert all(t["status"] in ("ok", "unsafe") for t in document["trials"])
    assert document["trials"][0]["speedup"] == 1.0 and document["decision"]["verdict"] != "failed"
    assert len(ResultsLog(results).done()) == len(names)
    lines = len(results.read_text().splitlines())
    again = cli("tune", f"{TINY}:workload", "--steps", "16", "--results", str(results))
    assert again.code == 2 and "already holds trial results" in again.stderr and "--resume" in again.stderr
    resumed = cli("tune", f"{TINY}:workload", "--steps", "16", "--results", str(results), "--resume", "--json")
    assert resumed.code == 0
    assert len(results.read_text().splitlines()) == lines, "every trial came from the file"
    cross = cli("tune", "cnn", "--steps", "16", "--results", str(results), "--resume")
    assert cross.code == 2 and "holds another run's trials" in cross.stderr and "workload" in cross.stderr
    assert "Traceback" not in cross.stderr and "hint:" in cross.stderr
    fewer = cli("tune", f"{TINY}:workload", "--steps", "8", "--results", str(results), "--resume")
    assert fewer.code == 2 and "steps 16 there, 8 here" in fewer.stderr
    assert len(results.read_text().splitlines()) == lines, "nothing written by a refused run"
    report = cli("report", "--tune", str(results))
    if document["best"] is not None:
        assert report.code == 0 and f"tune: {len(names)} trials; best safe" in report.stdout
    else:
        assert report.code == 0 and "no winner" in " ".join(report.stdout.split()), report.stdout
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
    ("import sys\nsys.exit(3)\ndef make(options): pass\n", "make called sys.exit(3)"),
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
    rows = [r for r in document["trials"] if r["role"] != "seed"]
    assert [r["stage"] for r in rows] == ["baseline", "data", "compute", "compute", "compute", "compute", "compute",
                                          "data", "communication", "reference"]
    assert rows[0]["speedup"] == 1.0 and rows[0]["held_out_loss"] is not None
    assert rows[2]["knobs"] == {"batched": True, "sparse": True}, "cumulative"
    assert rows[-1]["knobs"] == {"reference": True}, "the hand-written loop, its own knobs only"
    assert rows[-2]["knobs"]["ddp"] == 2
    assert rows[-2]["status"] == "ok" and rows[-2]["world_size"] == 2, rows[-2]
    assert rows[6]["knobs"]["batch_size"] == 2048
    if rows[6]["status"] == "unsafe":  # judged only where two seeds of the baseline agree
        assert all(r["knobs"].get("batch_size") != 2048 for r in rows[7:]), "an unsafe stage is not carried forward"
    assert all(0 < r["limit_share"] < 1 for r in rows if r["throughput"] is not None), "a share of the limit"
    assert isinstance(document["reference"], list)
    if not document["accuracy"]["loss_judged"] and not document["accuracy"]["metric_judged"]:
        assert document["decision"]["verdict"] == "undecided" and document["best"] is None
    for r in rows:
        if r["throughput"] is not None:
            assert r["samples_per_dollar"] == pytest.approx(r["throughput"] * 3600 / 2)
    assert page.read_text().count('class="trial"') >= 4
    assert len(ResultsLog(results).done()) == len(rows) + 1, "the stages and the baseline's second seed"
    lines = len(results.read_text().splitlines())
    text = cli("tune", "recsys", "--steps", "40", "--results", str(results), "--resume", "--price-per-hour", "2")
    assert text.code == 0, text.stderr
    assert "samples/$" in column_text(text.stdout, -1, edge="┃") and "communication" in column_text(text.stdout, 0)
    verdict = document["decision"]["verdict"]
    assert ("best safe stage" in text.stdout) == (verdict == "faster"), (verdict, text.stdout)
    assert len(results.read_text().splitlines()) == lines, "resumed from the file: nothing ran again"


@pytest.mark.parametrize(("args", "message"), [
    (["recsys", "--steps", "20"], "the recsys stages need --steps 40 or more"),
    (["recsys", "--budget-minutes", "5"], "--budget-minutes applies to a search"),
    (["cnn", "--search"], "--search is for recsys"),
    (["recsys", "--price-per-hour", "-1"], "--price-per-hour must be a positive number of USD"),
    (["cnn", "--price-per-kwh", "nan"], "--price-per-kwh must be 0 or more of USD"),
    (["cnn", "--price-per-kwh", "-0.1"], "--price-per-kwh must be 0 or more of USD"),
    (["recsys", "--price-per-hour", "0"], "--price-per-hour must be a positive number of USD"),
    (["cnn", "--nodes", "2"], "--nodes goes with --launcher"),
    (["cnn", "--knobs", "{}"], "--knobs goes with --launcher"),
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
    assert "RuntimeError: the loss fails on purpose" in column_text(result.stdout, -1)
    assert "the baseline itself failed" in result.stdout


@pytest.fixture
def fake_machine(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """`gpufly tune cnn` with a fake machine in place of the trial processes and two knobs to search."""
    import gpufly.tune
    import gpufly.tune.workload
    from gpufly.tune.workload import SearchSpace

    def use(speeds: dict[str, float], **machine: Any) -> None:
        monkeypatch.setattr(gpufly.tune.workload, "search_space",
                            lambda *args: SearchSpace({name: [True] for name in speeds}, False))
        monkeypatch.setattr(gpufly.tune, "SubprocessRunner", lambda *args: FakeMachine(speeds, **machine))

    return use


def test_tune_prints_the_winner_with_its_interval_and_the_evidence(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                  fake_machine: Callable[..., None]) -> None:
    fake_machine({"fast": 1.25, "same": 1.0}, noise=0.02, seed_spread=0.02)
    text = cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu")
    assert text.code == 0, text.stderr
    out = " ".join(text.stdout.split())
    assert re.search(r"best safe configuration: fast=True, 1\.\d\dx the baseline "
                     r"\(95% interval 1\.\d\d-1\.\d\dx over 4 A/B rounds\)", out), out
    assert re.search(r"noise: the baseline ran \d+ times through the run: [\d,]+-[\d,]+ samples/s \([\d.]+x apart\); "
                     r"noise floor \(standard deviation of the log throughput\) [\d.]+%", out)
    assert "accuracy: judged after 40 steps; two seeds of the baseline: probe loss 0.1% apart (judged)" in out
    assert "baseline, second seed" in column_text(text.stdout, -1) and "(4 rounds)" in column_text(text.stdout, 3)
    document = json.loads(cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--resume", "--json").stdout)
    assert document["decision"]["verdict"] == "faster" and document["best"]["configuration"] == "fast=True"
    low, high = document["best"]["speedup_interval"]
    assert low <= 1.25 <= high and document["best"]["rounds"] == 4
    assert document["steps"] == 40 and document["device"] == "cpu" and document["noise"]["baseline_runs"] >= 5


def test_tune_on_a_noisy_machine_says_so_and_names_no_winner(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            fake_machine: Callable[..., None]) -> None:
    fake_machine({"fast": 1.25, "same": 1.0}, noise=0.3)
    text = cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu")
    assert text.code == 0, text.stderr
    out = " ".join(text.stdout.split())
    assert "no winner (too noisy): the baseline's throughput varied" in out and "best safe" not in out
    report = cli("report", "--tune", str(tmp_path / "r.jsonl"))
    assert report.code == 0, report.stderr
    assert "no winner (too noisy)" in " ".join(report.stdout.split()), "the report says so, as the tuner did"


def test_tune_says_when_the_steps_are_too_few_to_judge_accuracy(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               fake_machine: Callable[..., None]) -> None:
    fake_machine({"fast": 1.25}, steps=40, seed_spread=1.0)
    text = cli("tune", "cnn", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu")
    out = " ".join(text.stdout.split())
    assert text.code == 0 and "no winner (undecided): too few steps to judge accuracy" in out
    assert "accuracy: not judged after 40 steps; two seeds of the baseline: probe loss 5.0% apart (too far to judge)"\
        in out


def _launch(cli: Any, *args: str) -> dict[str, Any]:
    result = cli("tune", *args, "--json")
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_launcher_slurm_prints_an_sbatch_script_for_the_best_configuration_and_runs_nothing(cli: Any,
                                                                                           tmp_path: Path) -> None:
    import shlex

    results = tmp_path / "r.jsonl"  # an earlier run of cnn over 40 steps, whose best safe trial is channels_last
    results.write_text((Path(__file__).parent.parent / "fixtures" / "tune" / "results-v1.jsonl").read_text())
    before = results.read_text()
    document = _launch(cli, "cnn", "--results", str(results), "--launcher", "slurm", "--nodes", "4",
                       "--gpus-per-node", "8")
    assert results.read_text() == before, "nothing ran, nothing was written"
    assert document["configuration"] == "channels_last=True" and document["source"] == str(results)
    assert document["request"] == {"workload": "cnn", "knobs": {"channels_last": True, "ddp": 32}, "steps": 40,
                                   "device": None, "seed": 0}
    script = document["sbatch"]["script"]
    directives = dict(line.removeprefix("#SBATCH --").split("=", 1) for line in script.splitlines()
                      if line.startswith("#SBATCH"))
    assert directives["nodes"] == "4" and directives["ntasks-per-node"] == "1" and directives["gpus-per-node"] == "8"
    srun = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    assert srun[1] == "torchrun" and "--nnodes=4" in srun and "--nproc-per-node=8" in srun
    assert "--rdzv-endpoint=$head:29500" in srun
    exported = next(line for line in script.splitlines() if line.startswith("export "))
    assert json.loads(shlex.split(exported)[1].split("=", 1)[1]) == document["request"]
    text = cli("tune", "cnn", "--results", str(results), "--launcher", "slurm", "--nodes", "4")
    assert text.code == 0 and "Nothing was run" in text.stdout
    assert "channels_last=True, the best safe configuration" in text.stdout
    assert script in text.stdout, "the script as it is, unwrapped"


def test_launcher_torchrun_prints_one_command_per_node_for_the_knobs_asked(cli: Any) -> None:
    import shlex

    document = _launch(cli, "train.py:build", "--knobs", '{"amp": "bf16", "ddp": 2}', "--launcher", "torchrun",
                       "--nodes", "2", "--gpus-per-node", "4", "--steps", "16", "--device", "cuda")
    assert document["configuration"] == "requested" and document["world_size"] == 8
    assert document["request"]["knobs"] == {"amp": "bf16", "ddp": 8} and document["request"]["device"] == "cuda"
    command = document["command"]
    words = shlex.split(command["shell"])
    assert words[1:] == command["argv"] and "--rdzv-endpoint=$HEAD_NODE_ADDR:29500" in words
    assert json.loads(command["environment"]["GPUFLY_TUNE_REQUEST"]) == document["request"]
    text = cli("tune", "train.py:build", "--launcher", "torchrun")
    assert text.code == 0 and "the baseline, the workload as it is" in text.stdout
    assert "on 2 nodes x 8 GPUs = 16 processes" in text.stdout and "# node 0 (head)" in text.stdout
    baseline = _launch(cli, "train.py:build", "--launcher", "torchrun")["command"]
    assert [shlex.split(line) for line in text.stdout.splitlines() if "torchrun --nnodes" in line] \
        == [shlex.split(baseline["shell"])] * 2, "the same command, once per node"
    many = cli("tune", "train.py:build", "--launcher", "torchrun", "--nodes", "1000")
    assert many.code == 0 and many.stdout.count("torchrun --nnodes=1000") == 1
    assert "each of the 1000 nodes" in many.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--launcher", "k8s"], "--launcher is torchrun or slurm, not 'k8s'"),
    (["--launcher", "slurm", "--nodes", "0"], "--nodes must be 1 or more"),
    (["--launcher", "slurm", "--html", "x.html"], "so --html would be ignored"),
    (["--launcher", "slurm", "--ddp", "2"], "so --ddp would be ignored"),
    (["--launcher", "slurm", "--price-per-hour", "2.5"], "so --price-per-hour would be ignored"),
    (["--launcher", "torchrun", "--price-per-kwh", "0.1"], "so --price-per-kwh would be ignored"),
    (["--launcher", "slurm", "--knobs", "[1]"], "--knobs must be a JSON object"),
    (["--launcher", "slurm", "--knobs", "{amp"], "--knobs is not JSON"),
    (["--launcher", "slurm", "--knobs", "{\"amp\": \"bf16\", \"ampp\": 1}"], "unknown knob 'ampp'; did you mean amp?"),
    (["--launcher", "slurm", "--results", "{tmp}/none.jsonl"], "no tune results at"),
])
def test_launcher_mistakes_are_one_error_line(cli: Any, tmp_path: Path, args: list[str], message: str) -> None:
    result = cli("tune", "cnn", *(arg.replace("{tmp}", str(tmp_path)) for arg in args))
    assert result.code == 2 and message in result.stderr and "hint:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not result.stdout


@pytest.fixture
def fake_stages(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """`gpufly tune recsys` (the case study's stages) on a fake machine whose results carry their batch, with a
    fixed copy bandwidth in place of the measured one."""
    import gpufly.cli.tune
    import gpufly.tune
    from gpufly.tune.stages import Limit

    monkeypatch.setattr(gpufly.cli.tune, "measure_copy_bandwidth",
                        lambda *args: Limit(1e10, bandwidth_interval=(0.95e10, 1.04e10), interval_level=0.978,
                                            copies=10))

    def use(speeds: dict[str, float], **machine: Any) -> None:
        fake = FakeMachine(speeds, **machine)

        def runner(trial: Any) -> Any:
            result = fake(trial)
            result.batch_size = int(trial.knobs.get("batch_size", 256))
            return result

        monkeypatch.setattr(gpufly.tune, "SubprocessRunner", lambda *args: runner)

    return use


STAGE_SPEEDS = {"batched": 1.2, "sparse": 8.0, "fused": 1.5, "optimizer_impl": 1.1, "batch_size": 2.0,
                "num_workers": 0.45, "ddp": 0.75, "reference": 14.0}


def test_recsys_stages_whose_accuracy_cannot_be_judged_are_unjudged_in_text_json_and_html(
        cli: Any, tmp_path: Path, fake_stages: Callable[..., None]) -> None:
    """Two seeds of the baseline 10.1% apart: no stage is called safe, a stage that drifts 4.2% included, and the
    run names no winner; the text, the JSON and the page all say the accuracy was not judged, and why."""
    fake_stages(STAGE_SPEEDS, costs={"batch_size": 0.021}, steps=40, seed_spread=2.02)
    results, page = tmp_path / "r.jsonl", tmp_path / "page.html"
    text = cli("tune", "recsys", "--steps", "40", "--results", str(results), "--html", str(page), "--device", "cpu")
    assert text.code == 0, text.stderr
    out = text.stdout
    assert "probe loss 10.1% apart (too far to judge)" in " ".join(out.split())
    assert "unjudged: accuracy not judged, seeds 10.1% apart" in column_text(out, -1)
    assert not re.search(r"\bsafe\b(?!ty)", out.replace("best safe", "")), "no stage is called safe"
    document = json.loads(cli("tune", "recsys", "--steps", "40", "--results", str(results), "--resume",
                              "--device", "cpu", "--json").stdout)
    stages = [r for r in document["trials"] if r["role"] == "trial"]
    assert {r["verdict"] for r in stages} == {"unjudged"} and {r["unjudged"] for r in stages} == {"seeds 10.1% apart"}
    assert document["decision"]["verdict"] == "undecided" and document["best"] is None
    body = page.read_text()
    assert "unjudged: accuracy not judged, seeds 10.1% apart" in body and 'data-verdict="safe"' not in body
    assert 'data-verdict="unjudged"' in body and "grey: accuracy" in " ".join(body.split())


def test_recsys_stages_slower_than_the_chain_are_not_built_on_and_say_so(
        cli: Any, tmp_path: Path, fake_stages: Callable[..., None]) -> None:
    fake_stages(STAGE_SPEEDS, noise=0.01, steps=160, seed_spread=0.01)
    run = cli("tune", "recsys", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu", "--json")
    assert run.code == 0, run.stderr
    rows = {r["configuration"]: r for r in json.loads(run.stdout)["trials"]}
    workers, ddp = rows["+ 1 loader worker, persistent"], rows["+ DDP over 2 processes"]
    assert workers["kept"] is False and workers["dropped"].startswith("slower than the stage it built on")
    assert "num_workers" not in ddp["knobs"] and ddp["knobs"]["batch_size"] == 2048, "built on the last kept stage"
    assert ddp["kept"] is False, "DDP at 0.75x is slower beyond the noise too"
    assert rows["+ batch 2048 (lr x8)"]["kept"] is True and rows["+ batch 2048 (lr x8)"]["verdict"] == "safe"
    text = cli("tune", "recsys", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu", "--resume")
    out = text.stdout
    assert "safe; not built on: slower than the stage it built on" in column_text(out, -1)
    assert "each stage builds on the last one kept" in " ".join(out.split())
    assert column_text(out, 3, edge="┃") == "median-step samples/s" and "median step/s" not in out


def test_the_run_records_device_versions_steps_batch_and_noise_floor(
        cli: Any, tmp_path: Path, fake_machine: Callable[..., None]) -> None:
    import platform

    import torch

    import gpufly

    fake_machine({"fast": 1.25}, noise=0.02, seed_spread=0.02)
    results, page = tmp_path / "r.jsonl", tmp_path / "page.html"
    text = cli("tune", "cnn", "--results", str(results), "--device", "cpu", "--html", str(page))
    assert text.code == 0, text.stderr
    out = " ".join(text.stdout.split())
    versions = f"torch {torch.__version__}; Python {platform.python_version()}; gpufly {gpufly.__version__}"
    assert f"measured on: device cpu; {versions}; 40 steps per trial; batch not reported" in out
    assert "noise: the baseline ran" in out
    assert "median-step samples/s" in out and "median step " not in out
    document = json.loads(cli("tune", "cnn", "--results", str(results), "--resume", "--json").stdout)
    assert document["versions"] == {"torch": str(torch.__version__), "python": platform.python_version(),
                                    "gpufly": gpufly.__version__}
    assert document["device"] == "cpu" and document["steps"] == 40 and "batch_size" in document
    assert document["noise"]["noise_floor"] is not None
    body = " ".join(page.read_text().split())
    assert f"device cpu; {versions}; 40 steps per trial" in body and "noise floor" in body


def test_launcher_refuses_timeout_as_it_refuses_the_other_run_only_options(cli: Any) -> None:
    result = cli("tune", "cnn", "--launcher", "torchrun", "--timeout", "3")
    assert result.code == 2 and "so --timeout would be ignored" in result.stderr and "hint:" in result.stderr
    assert result.stderr.count("error:") == 1 and not result.stdout


def test_recsys_reference_row_and_limit_carry_their_intervals_in_text_and_json(
        cli: Any, tmp_path: Path, fake_stages: Callable[..., None]) -> None:
    fake_stages(STAGE_SPEEDS, noise=0.01, steps=160, seed_spread=0.01)
    run = cli("tune", "recsys", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu", "--json")
    assert run.code == 0, run.stderr
    document = json.loads(run.stdout)
    reference = next(r for r in document["trials"] if r["stage"] == "reference")
    low, high = reference["speedup_interval"]
    assert low <= reference["speedup"] <= high and reference["pairs"] == 4 and reference["rounds"] == 0
    assert document["bandwidth"] == {"bytes_per_s": 1e10, "interval": [0.95e10, 1.04e10], "level": 0.978,
                                     "copies": 10}
    share = reference["limit_share"]
    assert reference["limit_share_interval"] == [pytest.approx(share / 1.04), pytest.approx(share / 0.95)]
    text = cli("tune", "recsys", "--results", str(tmp_path / "r.jsonl"), "--device", "cpu", "--resume").stdout
    assert re.search(r"\d+\.\d\dx \[\d+\.\d\d-\d+\.\d\d\] \(4 rounds\) = [\d,]+ / [\d,]+$", column_text(text, 4)), \
        "the reference's speedup, its interval, its rounds and the figures it is the ratio of"
    assert "copy bandwidth measured now, 10.00 GB/s [9.50-10.40] (median of 10 copies, 97.8% interval)" in " ".join(
        text.split())
    assert re.search(r"\d\.\d% \[\d\.\d-\d\.\d\]", column_text(text, 6)), "the limit with its range"


def test_a_missing_function_is_named_before_the_file_runs(cli: Any, tmp_path: Path) -> None:
    """`gpufly tune script.py:main` where main does not exist used to run the whole script (minutes of training, in
    the probe's case) before it said so: the file's source is read first, nothing of it runs."""
    ran = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"from pathlib import Path\nPath({str(ran)!r}).write_text('ran')\n\ndef train(options):\n"
                      "    pass\n\ndef mian():\n    pass\n")
    result = cli("tune", f"{script}:main", "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 2 and f"{script} has no function 'main'" in result.stderr, result.stderr
    assert "did you mean mian, train? Or define def main(options)" in result.stderr and not ran.exists(), \
        "nothing of the script ran"
    result = cli("tune", f"{script}:build", "--results", str(tmp_path / "r.jsonl"))
    assert "define def build(options): ... returning a Workload there, or name one of its functions: train, mian" \
        in result.stderr, "the function asked for, and the ones there are"
    assert not ran.exists() and not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("source", [
    "from os.path import *\n",
    "def __getattr__(name):\n    return lambda options: None\n",
    "globals()['make'] = lambda options: None\n",
    "if True:\n    for make in [1]:\n        pass\n",
])
def test_names_the_source_may_bind_unseen_are_left_to_the_import(source: str) -> None:
    import ast

    from gpufly.loading import top_level_names

    names = top_level_names(ast.parse(source))
    assert names is None or "make" in names
