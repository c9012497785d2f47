"""The search: failures recorded and passed over, drift rejected, results kept through an interrupt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.tune.engine import ResultsLog, Search, Trial, TrialResult, run_identity, run_in_subprocess

TINY = str(Path(__file__).parent.parent / "fixtures" / "tune" / "tiny.py") + ":workload"


def _fake(speeds: dict[str, float], probe: dict[str, float] | None = None, fail: tuple[str, ...] = ()):
    calls: list[str] = []

    def runner(workload: str, trial: Trial, timeout_s: float) -> TrialResult:
        calls.append(trial.name)
        if any(f in trial.name for f in fail):
            return TrialResult(trial.name, trial.knobs, "oom", error="CUDA out of memory")
        speed = 100.0
        for knob in trial.knobs:
            speed *= speeds.get(knob, 1.0)
        eval_loss = 0.5
        for knob in trial.knobs:
            eval_loss = (probe or {}).get(knob, eval_loss)
        return TrialResult(trial.name, trial.knobs, "ok", throughput=speed, eval_loss=eval_loss, losses=[1.0])

    return runner, calls


def test_single_knobs_then_a_greedy_combination_and_failures_do_not_stop_it(tmp_path: Path) -> None:
    runner, calls = _fake({"a": 1.5, "b": 1.2, "c": 0.9}, fail=("d",))
    search = Search("w", {"a": [True], "b": [True], "c": [True], "d": [True]}, ResultsLog(tmp_path / "r.jsonl"),
                    runner)
    best = search.run()
    assert calls == ["baseline", "a=True", "b=True", "c=True", "d=True", "a=True + b=True"]
    assert best is not None and best.knobs == {"a": True, "b": True} and best.speedup == pytest.approx(1.8)
    statuses = {r.name: r.status for r in search.results}
    assert statuses["d=True"] == "oom", "the failure is recorded and the search went on"


def test_a_knob_that_breaks_the_loss_is_rejected_however_fast(tmp_path: Path) -> None:
    runner, _ = _fake({"fast_but_wrong": 5.0, "b": 1.2}, probe={"fast_but_wrong": 0.9})
    search = Search("w", {"fast_but_wrong": [True], "b": [True]}, ResultsLog(tmp_path / "r.jsonl"), runner)
    best = search.run()
    wrong = next(r for r in search.results if r.name == "fast_but_wrong=True")
    assert wrong.status == "unsafe" and wrong.loss_drift == pytest.approx(0.8)
    assert best is not None and best.knobs == {"b": True}


def test_results_survive_an_interrupt_and_resume_skips_done_trials(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "r.jsonl")
    runner, calls = _fake({"a": 1.5, "b": 1.2})

    def interrupted(workload: str, trial: Trial, timeout_s: float) -> TrialResult:
        if trial.name == "b=True":
            raise KeyboardInterrupt
        return runner(workload, trial, timeout_s)

    with pytest.raises(KeyboardInterrupt):
        Search("w", {"a": [True], "b": [True]}, log, interrupted).run()
    assert [json.loads(line)["name"] for line in log.path.read_text().splitlines()] == ["baseline", "a=True"]
    with log.path.open("a") as out:
        out.write('{"name": "cut by a kil')  # a half-written line from a kill
    calls.clear()
    best = Search("w", {"a": [True], "b": [True]}, log, runner).run()
    assert calls == ["b=True", "a=True + b=True"], "baseline and a=True came from the file"
    assert best is not None and best.knobs == {"a": True, "b": True}


def test_the_budget_stops_new_trials(tmp_path: Path) -> None:
    runner, calls = _fake({"a": 1.5})
    Search("w", {"a": [True], "b": [True]}, ResultsLog(tmp_path / "r.jsonl"), runner, budget_s=0.0).run()
    assert calls == ["baseline"]


def test_real_trials_in_subprocesses_record_oom_and_drift() -> None:
    baseline = run_in_subprocess(TINY, Trial("baseline", {}), timeout_s=120, steps=20)
    assert baseline.status == "ok", baseline.error
    assert baseline.throughput and baseline.throughput > 0 and len(baseline.losses) == 20
    again = run_in_subprocess(TINY, Trial("baseline", {}), timeout_s=120, steps=20)
    assert again.eval_loss == baseline.eval_loss, "a trial is deterministic: same samples, same seed"
    oom = run_in_subprocess(TINY, Trial("explode", {"explode": True}), timeout_s=120, steps=20)
    assert oom.status == "oom" and "out of memory" in (oom.error or "").lower()
    bigger = run_in_subprocess(TINY, Trial("batch 128", {"batch_size": 128}), timeout_s=120, steps=20)
    assert bigger.status == "ok" and len(bigger.losses) == 5, "the same samples in fewer, larger steps"
    timeout = run_in_subprocess(TINY, Trial("slow", {}), timeout_s=0.01, steps=20)
    assert timeout.status == "timeout"


def test_a_user_workload_that_takes_no_options_cannot_be_given_any() -> None:
    target = TINY.replace(":workload", ":no_options")
    result = run_in_subprocess(target, Trial("x", {"loss_scale": 2.0}), timeout_s=120, steps=8)
    assert result.status == "failed" and "takes no options" in (result.error or "")


def test_ddp_over_two_cpu_processes_matches_one_process() -> None:
    single = run_in_subprocess(TINY, Trial("single", {}), timeout_s=180, steps=16)
    ddp = run_in_subprocess(TINY, Trial("ddp", {"ddp": 2}), timeout_s=180, steps=16)
    assert single.status == "ok" and ddp.status == "ok", ddp.error
    assert len(ddp.losses) == len(single.losses) == 16, "the same global batches"
    assert ddp.world_size == 2 and single.world_size == 1, "torchrun really started two processes"
    assert ddp.loss_drift is None  # set by the search, not the runner
    from gpufly.tune.engine import DRIFT_TOLERANCE, loss_drift

    drift = loss_drift(ddp.eval_loss, single.eval_loss)
    assert drift is not None and drift < 1e-4 < DRIFT_TOLERANCE, "gloo all-reduce of the half-batch gradients"
    compressed = run_in_subprocess(TINY, Trial("fp16", {"ddp": 2, "ddp_hook": "fp16"}), timeout_s=180, steps=16)
    assert compressed.status == "ok" and compressed.world_size == 2
    assert loss_drift(compressed.eval_loss, single.eval_loss) < DRIFT_TOLERANCE
    powersgd = run_in_subprocess(TINY, Trial("powersgd", {"ddp": 2, "ddp_hook": "powersgd"}), timeout_s=180,
                                 steps=16)
    assert powersgd.status == "ok" and powersgd.world_size == 2, powersgd.error


def test_a_failing_ddp_trial_reports_the_ranks_error_not_the_launchers() -> None:
    from gpufly.tune.engine import _error_line

    stderr = ("[rank0]: Traceback (most recent call last):\n[rank0]: TypeError: BF16 all reduce communication hook "
              "required CUDA 11+\n[rank1]: TypeError: BF16 ...\ntorch.distributed.elastic.multiprocessing.errors."
              "ChildFailedError: \n============================================================\n")
    assert _error_line(stderr) == "TypeError: BF16 all reduce communication hook required CUDA 11+"
    assert _error_line("RuntimeError: boom\n") == "RuntimeError: boom"
    assert _error_line("") == "exited with no message"


def test_inference_trials_measure_what_quantization_and_pruning_cost() -> None:
    from gpufly.tune.engine import loss_drift

    served = run_in_subprocess(TINY, Trial("serve", {"task": "infer"}), timeout_s=120, steps=16)
    assert served.status == "ok" and served.throughput and served.eval_loss is not None, served.error
    quantized = run_in_subprocess(TINY, Trial("int8", {"task": "infer", "quantize": "int8_dynamic"}), 120, steps=16)
    assert quantized.status == "ok", quantized.error
    assert 0 < loss_drift(quantized.eval_loss, served.eval_loss) < 0.05, "int8 costs a little, measured"
    pruned = run_in_subprocess(TINY, Trial("prune 90%", {"task": "infer", "prune": 0.9}), timeout_s=120, steps=16)
    assert pruned.status == "ok" and loss_drift(pruned.eval_loss, served.eval_loss) > 0.05, "90% pruning hurts"


def test_on_a_gpu_the_batch_the_measured_memory_says_fits_is_tried(tmp_path: Path) -> None:
    calls: list[str] = []

    def runner(workload: str, trial: Trial, timeout_s: float) -> TrialResult:
        calls.append(trial.name)
        batch = int(trial.knobs.get("batch_size", 32))
        if batch > 256:
            return TrialResult(trial.name, trial.knobs, "oom", error="CUDA out of memory")
        return TrialResult(trial.name, trial.knobs, "ok", throughput=100.0 * batch / 32, eval_loss=0.5,
                           batch_size=batch, peak_memory_bytes=batch * 2**28, device_memory_bytes=80 * 2**30)

    search = Search("w", {"batch_size": [128]}, ResultsLog(tmp_path / "r.jsonl"), runner)
    best = search.run()
    assert calls == ["baseline", "batch_size=128", "batch_size=256"], "8 GiB of 80 at batch 32: 8x fits (85% headroom)"
    assert best is not None and best.knobs == {"batch_size": 256}
    calls.clear()
    short = Search("w", {"batch_size": [64, 128], "amp": ["bf16"]}, ResultsLog(tmp_path / "s.jsonl"), runner,
                   steps=8)
    short.run()
    assert calls[:3] == ["baseline", "batch_size=64", "amp=bf16"], "8 steps: batches over 2x leave under 4 steps"


def test_two_values_of_one_knob_are_not_combined(tmp_path: Path) -> None:
    runner, calls = _fake({"impl": 1.2})
    Search("w", {"impl": ["foreach", "fused"]}, ResultsLog(tmp_path / "r.jsonl"), runner).run()
    assert calls == ["baseline", "impl=foreach", "impl=fused"]


def test_throughput_is_the_median_step_so_one_slow_step_does_not_move_it() -> None:
    slow = run_in_subprocess(TINY, Trial("slow", {"slow_step": 8}), timeout_s=120, steps=16)
    assert slow.status == "ok" and slow.throughput and slow.mean_throughput, slow.error
    # One 0.5 s step among a dozen of about a millisecond: the mean collapses, the median does not.
    assert slow.throughput > 5 * slow.mean_throughput


def test_real_trials_that_break_the_loss_or_lower_the_metric_are_unsafe_and_not_chosen(tmp_path: Path) -> None:
    search = Search(TINY, {"loss_scale": [3.0], "metric_penalty": [0.5]}, ResultsLog(tmp_path / "r.jsonl"),
                    lambda w, t, s: run_in_subprocess(w, t, s, steps=12), timeout_s=120)
    best = search.run()
    by_name = {r.name: r for r in search.results}
    assert by_name["loss_scale=3.0"].status == "unsafe" and by_name["loss_scale=3.0"].loss_drift > 0.02
    penalized = by_name["metric_penalty=0.5"]
    assert penalized.status == "unsafe" and penalized.loss_drift == 0.0, "the loss is the same; the metric is not"
    assert penalized.metric_drop is not None and penalized.metric_drop > 0.01
    assert best is not None and best.name == "baseline"


def test_a_lower_is_better_metric_that_rises_is_unsafe(tmp_path: Path) -> None:
    def runner(workload: str, trial: Trial, timeout_s: float) -> TrialResult:
        metric = 0.50 if not trial.knobs else 0.52
        return TrialResult(trial.name, trial.knobs, "ok", throughput=150.0 if trial.knobs else 100.0,
                           eval_loss=0.5, eval_metric=metric, higher_is_better=False)

    search = Search("w", {"a": [True]}, ResultsLog(tmp_path / "r.jsonl"), runner)
    assert search.run().name == "baseline"
    assert search.results[1].status == "unsafe" and search.results[1].metric_drop > 0.01


def test_with_ddp_the_hooks_and_bucket_sizes_are_tried_with_it_and_combined(tmp_path: Path) -> None:
    runner, calls = _fake({"ddp": 1.2, "ddp_hook": 1.3, "bucket_mb": 1.1})
    search = Search("w", {"ddp": [2], "ddp_hook": ["powersgd"], "bucket_mb": [5]}, ResultsLog(tmp_path / "r.jsonl"),
                    runner)
    best = search.run()
    assert calls == ["baseline", "ddp=2", "ddp=2 + ddp_hook=powersgd", "ddp=2 + bucket_mb=5",
                     "ddp=2 + ddp_hook=powersgd + bucket_mb=5"], "ddp=2 alone adds nothing to the hook's trial"
    assert best is not None and best.knobs == {"ddp": 2, "ddp_hook": "powersgd", "bucket_mb": 5}


def test_the_results_file_records_its_run_and_refuses_another_or_a_garbage_line(tmp_path: Path) -> None:
    log = ResultsLog(tmp_path / "r.jsonl")
    runner, _ = _fake({"a": 1.5})
    identity = run_identity("cnn", "train", 40, "cpu", "2.13")
    Search("w", {"a": [True]}, log, runner, identity=identity).run()
    assert json.loads(log.path.read_text().splitlines()[0]) == {"gpufly_tune_run": identity}
    assert len(log.done()) == 2, "the header is not a trial"
    other = run_identity("transformer", "train", 40, "cpu", "2.13")
    with pytest.raises(GpuflyError, match="another run's trials: workload 'cnn' there, 'transformer' here"):
        Search("w", {"a": [True]}, log, runner, identity=other).run()
    old = ResultsLog(tmp_path / "old.jsonl")
    old.append(TrialResult("baseline", {}, "ok", throughput=1.0))
    with pytest.raises(GpuflyError, match="does not record which run"):
        Search("w", {}, old, runner, identity=identity).run()
    lines = log.path.read_text().splitlines()
    log.path.write_text("\n".join([lines[0], "garbage", *lines[1:]]) + "\n")
    with pytest.raises(GpuflyError, match="line 2 is not a tune trial"):
        log.done()


def test_a_batch_that_leaves_fewer_than_four_steps_is_refused_not_given_more_samples() -> None:
    """32 x 8 samples at batch 128 are 2 steps; topping them up to 4 would train on twice the samples."""
    result = run_in_subprocess(TINY, Trial("batch 128", {"batch_size": 128}), timeout_s=120, steps=8)
    assert result.status == "failed" and "leaves 2 steps" in (result.error or "") and "--steps 16" in result.error


def test_a_baseline_whose_loss_is_not_finite_fails_and_cannot_bless_a_trial() -> None:
    from gpufly.tune.engine import judge

    nan = float("nan")
    baseline = judge(TrialResult("baseline", {}, "ok", throughput=10.0, eval_loss=nan), None)
    assert baseline.status == "failed" and "not finite" in (baseline.error or "")
    fine = TrialResult("baseline", {}, "ok", throughput=10.0, eval_loss=nan)  # as read back from an old file
    trial = judge(TrialResult("amp", {"amp": "bf16"}, "ok", throughput=20.0, eval_loss=123.0), fine)
    assert trial.status == "unsafe" and trial.loss_drift == float("inf")
