"""`gpufly tune` from the shell: a user's workload, the results file, --resume, and clear loading errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TINY = Path(__file__).parent.parent / "fixtures" / "tune" / "tiny.py"


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


def test_workload_loading_errors_are_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cases = {
        "nosuchthing": "unknown workload 'nosuchthing'",
        "no_such_module_abc:make": "cannot import no_such_module_abc",
        f"{TINY}:missing": "has no function 'missing'",
        f"{tmp_path / 'absent.py'}:make": "no such file",
    }
    for target, message in cases.items():
        result = cli("tune", target, "--results", str(tmp_path / "r.jsonl"))
        assert result.code == 2, (target, result.stderr)
        assert message in result.stderr and "hint:" in result.stderr and "Traceback" not in result.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("def make():\n    return 42\n")
    result = cli("tune", f"{broken}:make", "--results", str(tmp_path / "r2.jsonl"))
    assert result.code == 2 and "returned int, not a Workload" in result.stderr and "Traceback" not in result.stderr
    sources = {"syntax.py": "def make(:\n    pass\n", "importing.py": "import no_such_module_xyz\ndef make(): pass\n",
               "raising.py": "def make(options):\n    raise RuntimeError('boom')\n"}
    messages = {"syntax.py": "has a syntax error: invalid syntax",
                "importing.py": "No module named 'no_such_module_xyz'",
                "raising.py": "failed to build: RuntimeError: boom"}
    for name, source in sources.items():
        (tmp_path / name).write_text(source)
        result = cli("tune", f"{tmp_path / name}:make", "--results", str(tmp_path / f"{name}.jsonl"))
        assert result.code == 2 and messages[name] in result.stderr, (name, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 2, result.stderr
    syntax = cli("tune", f"{tmp_path / 'syntax.py'}:make", "--results", str(tmp_path / "s.jsonl"))
    assert "syntax.py, line 1" in syntax.stderr and "py_compile" in syntax.stderr, "its own hint: where to look"


def test_task_is_train_or_infer(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("tune", "cnn", "--task", "serve", "--results", str(tmp_path / "r.jsonl"))
    assert result.code == 2 and "--task is train or infer" in result.stderr
    batched = cli("tune", "recsys", "--task", "infer", "--ddp", "2", "--results", str(tmp_path / "r.jsonl"))
    assert batched.code == 2 and "takes neither --ddp" in batched.stderr


def test_an_html_path_in_no_folder_is_refused_before_any_trial(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "r.jsonl"
    result = cli("tune", f"{TINY}:workload", "--results", str(results), "--html", str(tmp_path / "no" / "t.html"))
    assert result.code == 2 and "is not a folder" in result.stderr and "Traceback" not in result.stderr
    assert not results.exists()


def test_bad_results_paths_and_numbers_are_refused_before_any_trial(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "out"
    folder.mkdir()
    cases = [
        (["--results", "/proc/nope/r.jsonl"], "/proc/nope is not a folder"),
        (["--results", str(folder)], "is a folder"),
        (["--results", str(folder), "--resume"], "is a folder"),
        (["--budget-minutes", "nan"], "--budget-minutes must be a positive number"),
        (["--budget-minutes", "inf"], "--budget-minutes must be a positive number"),
        (["--timeout", "nan"], "--timeout must be a positive number"),
        (["--ddp", "-1"], "--ddp is a process count"),
        (["--ddp", "1"], "--ddp 1 is one process, which is no DDP"),
        (["--steps", "2"], "--steps must be at least 4"),
    ]
    for args, message in cases:
        argv = ["tune", f"{TINY}:workload", *args]
        if "--results" not in args:
            argv += ["--results", str(tmp_path / "r.jsonl")]
        result = cli(*argv)
        assert result.code == 2 and message in result.stderr, (args, result.stderr)
        assert "hint:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r.jsonl").exists() and not any(folder.iterdir())


def test_an_unwritable_results_file_is_a_one_line_error(tmp_path: Path) -> None:
    """A results file that cannot be written (a device that is full, whoever runs it, root included)."""
    from gpufly.errors import GpuflyError
    from gpufly.tune.engine import ResultsLog, TrialResult

    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    full = tmp_path / "r.jsonl"
    full.symlink_to("/dev/full")
    with pytest.raises(GpuflyError, match="cannot write the results file"):
        ResultsLog(full).append(TrialResult("baseline", {}, "ok"))


def test_the_help_names_the_builtins_and_the_forms_of_a_user_workload(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("tune", "--help")
    text = " ".join(result.stdout.split())
    assert result.code == 0
    assert all(word in text for word in ("cnn", "transformer", "recsys", "module:function", "file.py:function"))


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


def test_report_tune_says_why_a_file_has_no_best_trial(cli, tmp_path: Path) -> None:
    from gpufly.tune.engine import ResultsLog, TrialResult

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
