"""The results file: a header with the run and schema, one trial a line, read back strictly, old files still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.tune import GreedyPlan, ResultsLog, Search, Trial, TrialResult, run_identity
from gpufly.tune.results import SCHEMA_VERSION

OLD = Path(__file__).parent.parent / "fixtures" / "tune" / "results-v1.jsonl"
"""A file as gpufly wrote it before the header carried a schema_version (and before trials had a stage)."""


def _ok(trial: Trial) -> TrialResult:
    return TrialResult(trial.name, trial.knobs, "ok", throughput=150.0 if trial.knobs else 100.0, eval_loss=0.5)


def test_the_file_records_its_run_and_schema_and_refuses_another_run(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "r.jsonl")
    identity = run_identity("cnn", "train", 40, "cpu", "2.13")
    Search(GreedyPlan({"a": [True]}), log, _ok, identity=identity).run()
    assert json.loads(log.path.read_text().splitlines()[0]) == {"gpufly_tune_run": identity,
                                                                "schema_version": SCHEMA_VERSION}
    assert [r.role for r in log.done().values()] == ["baseline", "seed", "trial"], "the header is not a trial"
    other = run_identity("transformer", "train", 40, "cpu", "2.13")
    with pytest.raises(GpuflyError, match="another run's trials: workload 'cnn' there, 'transformer' here"):
        Search(GreedyPlan({"a": [True]}), log, _ok, identity=other).run()


def test_a_file_without_a_header_is_read_but_not_resumed(tmp_path: Path) -> None:
    old = ResultsLog(tmp_path / "old.jsonl")
    old.append(TrialResult("baseline", {}, "ok", throughput=1.0, speedup=1.0))
    assert old.best_safe_or_error().name == "baseline"
    with pytest.raises(GpuflyError, match="does not record which run"):
        Search(GreedyPlan({}), old, _ok, identity=run_identity("cnn", "train", 40, "cpu", "2.13")).run()


def test_a_file_from_an_earlier_gpufly_is_still_read_but_not_resumed(tmp_path: Path) -> None:
    log = ResultsLog(OLD)
    assert log.schema_version() == 1
    done = list(log.done().values())
    assert [r.name for r in done] == ["baseline", "amp=bf16", "channels_last=True", "batch_size=128"]
    assert done[1].loss_drift == float("inf") and done[0].losses == [2.3, 2.2, 2.1] and done[0].stage is None
    assert log.best_safe_or_error().knobs == {"channels_last": True}, "the unsafe 3x trial is never chosen"
    copy = tmp_path / "old.jsonl"
    shutil.copy(OLD, copy)
    calls: list[str] = []

    def runner(trial: Trial) -> TrialResult:
        calls.append(trial.name)
        return _ok(trial)

    with pytest.raises(GpuflyError, match=r"older gpufly \(results schema 1\), which measured throughput another way"):
        Search(GreedyPlan({"amp": ["bf16"], "channels_last": [True]}), ResultsLog(copy), runner,
               identity=run_identity("cnn", "train", 40, "cpu", "2.13.0+cpu")).run()
    assert calls == [], "nothing mixed into the old file"


def test_a_newer_schema_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    path.write_text(json.dumps({"gpufly_tune_run": {"workload": "cnn"}, "schema_version": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(GpuflyError, match=f"results schema {SCHEMA_VERSION + 1}") as info:
        ResultsLog(path).done()
    assert "upgrade gpufly" in (info.value.hint or "")


@pytest.mark.parametrize(("line", "message"), [
    ("garbage", "line 2 is not a tune trial"),
    ('{"name": "x", "knobs": {}, "status": 3}', "line 2 is not a tune trial: .* status must be a string, got 3"),
    ('{"name": "x", "knobs": {}, "status": "ok", "throughput": "fast"}', "throughput must be"),
    ('{"name": "x", "knobs": {}}', "status is missing"),
])
def test_a_line_that_is_not_a_trial_is_an_error_naming_it(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "r.jsonl"
    trial = json.dumps({"name": "baseline", "knobs": {}, "status": "ok"})
    path.write_text(f"{json.dumps({'gpufly_tune_run': {}, 'schema_version': SCHEMA_VERSION})}\n{line}\n{trial}\n")
    with pytest.raises(GpuflyError, match=message):
        ResultsLog(path).done()


@pytest.mark.parametrize(("content", "message"), [
    ("", "holds no tune trials"),
    (json.dumps({"name": "baseline", "knobs": {}, "status": "oom"}) + "\n",
     r"holds 1 trials and none is safe \(1 oom\)"),
])
def test_a_file_with_no_safe_trial_says_why(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(content)
    with pytest.raises(GpuflyError, match=message):
        ResultsLog(path).best_safe_or_error()


def test_an_unwritable_results_file_is_a_one_line_error(tmp_path: Path) -> None:
    """A results file that cannot be written (a device that is full, whoever runs it, root included)."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    full = tmp_path / "r.jsonl"
    full.symlink_to("/dev/full")
    with pytest.raises(GpuflyError, match="cannot write the results file"):
        ResultsLog(full).append(TrialResult("baseline", {}, "ok"))


def test_an_unreadable_results_file_is_a_one_line_error(tmp_path: Path) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(GpuflyError, match="is not a text file") as info:
        ResultsLog(binary).done()
    assert "--results FILE" in (info.value.hint or "")


def test_a_trial_is_one_row_shape_and_a_stage_adds_its_fields() -> None:
    result = TrialResult("amp=bf16", {"amp": "bf16"}, "ok", throughput=1000.0, speedup=2.0, eval_metric=0.44,
                         seconds=1.234)
    row = result.to_dict()
    assert list(row) == ["configuration", "knobs", "status", "role", "throughput", "median_step_throughput", "unit",
                         "throughputs", "speedup", "speedup_interval", "rounds", "peak_memory_bytes", "loss_drift",
                         "eval_metric", "metric_drop", "world_size", "nodes", "error", "seconds", "energy_j",
                         "joules_per_unit", "energy_note", "energy_cost_per_million", "time_cost_per_million",
                         "verdict", "unjudged", "unsafe_because", "paired_throughput", "paired_baseline", "pairs",
                         "runs", "shown_run"]
    assert row["seconds"] == 1.23 and row["configuration"] == "amp=bf16" and row["verdict"] == "safe"
    result.stage = "compute"
    staged = result.to_dict(price_per_hour=2.0)
    assert staged["stage"] == "compute" and staged["held_out_loss"] == 0.44
    assert staged["kept"] is True and staged["dropped"] is None
    assert staged["samples_per_dollar"] == pytest.approx(1000.0 * 3600 / 2)
    assert result.to_dict()["samples_per_dollar"] is None, "no price, no samples per dollar"


@pytest.mark.parametrize(("changes", "message"), [
    ({"speedup": "fast"}, "speedup must be a number"),
    ({"speedup": float("nan")}, "speedup must be a finite number of at least 0, got NaN"),
    ({"throughput": float("inf")}, "throughput must be a finite number of at least 0, got Infinity"),
    ({"seconds": -1.0}, "seconds must be a finite number of at least 0, got -1.0"),
    ({"status": "great"}, 'status "great" is not one of ok, unsafe, oom, failed, timeout'),
])
def test_a_trial_no_gpufly_wrote_is_refused_naming_the_field(tmp_path: Path, changes: dict, message: str) -> None:
    path = tmp_path / "r.jsonl"
    trial = {"name": "baseline", "knobs": {}, "status": "ok", "throughput": 1.0, "speedup": 1.0}
    lines = [{"gpufly_tune_run": {}, "schema_version": SCHEMA_VERSION}, {**trial, **changes}, trial]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(GpuflyError, match="line 2 is not a tune trial") as caught:
        ResultsLog(path).done()
    assert message in caught.value.message


def test_a_losses_list_may_hold_nan_as_a_diverged_trial_records_it(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    trial = {"name": "baseline", "knobs": {}, "status": "failed", "losses": [2.0, float("nan")],
             "loss_drift": float("inf")}
    path.write_text(json.dumps(trial) + "\n")
    assert [result.status for result in ResultsLog(path).done().values()] == ["failed"]
