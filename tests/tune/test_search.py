"""The search and its plans, with a fake runner: failures recorded and passed over, drift rejected, results kept
through an interrupt, the budget, the batch that fits, the DDP pairing and the staged case study."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufly.tune import GreedyPlan, ResultsLog, Search, Stage, StagePlan, Trial, TrialResult, best, judge


class FakeRunner:
    """Each knob multiplies the baseline's 100 samples/s by its speed; a knob in ``probe`` sets the probe loss;
    a trial whose name contains one of ``fail`` runs out of memory. ``calls`` counts what ran."""

    def __init__(self, speeds: dict[str, float], probe: dict[str, float] | None = None,
                 fail: tuple[str, ...] = ()) -> None:
        self.speeds, self.probe, self.fail = speeds, probe or {}, fail
        self.calls: list[str] = []

    def __call__(self, trial: Trial) -> TrialResult:
        self.calls.append(trial.name)
        if any(f in trial.name for f in self.fail):
            return TrialResult(trial.name, trial.knobs, "oom", error="CUDA out of memory")
        speed, eval_loss = 100.0, 0.5
        for knob in trial.knobs:
            speed *= self.speeds.get(knob, 1.0)
            eval_loss = self.probe.get(knob, eval_loss)
        return TrialResult(trial.name, trial.knobs, "ok", throughput=speed, eval_loss=eval_loss, losses=[1.0])


def first_runs(calls: list[str]) -> list[str]:
    """The configurations run, in the order each first ran: the baseline's own runs (again and again through the
    search, and with a second seed) and the A/B rounds' repeats left out."""
    return [name for name in dict.fromkeys(calls) if name != "baseline" and "(seed" not in name]


def _search(tmp_path: Path, knobs: dict[str, list[object]], runner: Callable[[Trial], TrialResult],
            **options: object) -> Search:
    plan_options = {k: options.pop(k) for k in ("fixed", "steps") if k in options}
    return Search(GreedyPlan(knobs, **plan_options), ResultsLog(tmp_path / "r.jsonl"), runner, **options)


def test_single_knobs_then_a_greedy_combination_and_failures_do_not_stop_it(tmp_path: Path) -> None:
    runner = FakeRunner({"a": 1.5, "b": 1.2, "c": 0.9}, fail=("d",))
    search = _search(tmp_path, {"a": [True], "b": [True], "c": [True], "d": [True]}, runner)
    chosen = search.run()
    runs = first_runs(runner.calls)
    assert set(runs[:4]) == {"a=True", "b=True", "c=True", "d=True"} and runs[4:] == ["a=True + b=True"]
    assert runner.calls[:2] == ["baseline", "baseline (seed 1)"]
    assert chosen is not None and chosen.knobs == {"a": True, "b": True} and chosen.speedup == pytest.approx(1.8)
    assert {r.name: r.status for r in search.results}["d=True"] == "oom", "the failure is recorded, the search went on"


def test_a_knob_that_breaks_the_loss_is_rejected_however_fast(tmp_path: Path) -> None:
    search = _search(tmp_path, {"fast_but_wrong": [True], "b": [True]},
                     FakeRunner({"fast_but_wrong": 5.0, "b": 1.2}, probe={"fast_but_wrong": 0.9}))
    chosen = search.run()
    wrong = next(r for r in search.results if r.name == "fast_but_wrong=True")
    assert search.decision().verdict == "faster"
    assert wrong.status == "unsafe" and wrong.loss_drift == pytest.approx(0.8)
    assert chosen is not None and chosen.knobs == {"b": True}


def test_results_survive_an_interrupt_and_resume_skips_done_trials(tmp_path: Path) -> None:
    runner = FakeRunner({"a": 1.5, "b": 1.2})

    def interrupted(trial: Trial) -> TrialResult:
        if trial.name == "b=True":
            raise KeyboardInterrupt
        return runner(trial)

    log = ResultsLog(tmp_path / "r.jsonl")
    with pytest.raises(KeyboardInterrupt):
        Search(GreedyPlan({"a": [True], "b": [True]}), log, interrupted).run()
    ran_before = set(runner.calls)
    in_file = {json.loads(line)["name"] for line in log.path.read_text().splitlines()}
    assert in_file == ran_before, "every run that ended is in the file"
    with log.path.open("a") as out:
        out.write('{"name": "cut by a kil')  # a half-written line from a kill
    runner.calls.clear()
    chosen = Search(GreedyPlan({"a": [True], "b": [True]}), log, runner).run()
    searched = runner.calls[:runner.calls.index("a=True + b=True")]
    assert not (in_file - {"baseline"}) & set(searched), "what the file holds is not run again"
    assert "b=True" in searched
    assert chosen is not None and chosen.knobs == {"a": True, "b": True}


class FakeClock:
    """Each reading is ``step`` seconds after the last: a run whose trials each take ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


@pytest.mark.parametrize(("budget_s", "singles", "combined"), [(0.0, 0, 0), (10.0, 1, 0), (None, 2, 1)])
def test_the_budget_stops_new_trials(tmp_path: Path, budget_s: float | None, singles: int, combined: int) -> None:
    runner = FakeRunner({"a": 1.5, "b": 1.2})
    _search(tmp_path, {"a": [True], "b": [True]}, runner, budget_s=budget_s, clock=FakeClock(6.0)).run()
    runs = first_runs(runner.calls)
    assert len([r for r in runs if "+" not in r]) == singles and len([r for r in runs if "+" in r]) == combined


def test_on_a_gpu_the_batch_the_measured_memory_says_fits_is_tried(tmp_path: Path) -> None:
    calls: list[str] = []

    def runner(trial: Trial) -> TrialResult:
        calls.append(trial.name)
        batch = int(trial.knobs.get("batch_size", 32))
        if batch > 256:
            return TrialResult(trial.name, trial.knobs, "oom", error="CUDA out of memory")
        return TrialResult(trial.name, trial.knobs, "ok", throughput=100.0 * batch / 32, eval_loss=0.5,
                           batch_size=batch, peak_memory_bytes=batch * 2**28, device_memory_bytes=80 * 2**30)

    chosen = _search(tmp_path, {"batch_size": [128]}, runner).run()
    assert set(first_runs(calls)) == {"batch_size=128", "batch_size=256"}, "8 GiB of 80 at batch 32: 8x fits"
    assert chosen is not None and chosen.knobs == {"batch_size": 256}
    calls.clear()
    short = Search(GreedyPlan({"batch_size": [64, 128], "amp": ["bf16"]}, steps=8), ResultsLog(tmp_path / "s.jsonl"),
                   runner)
    short.run()
    assert set(first_runs(calls)) == {"batch_size=64", "amp=bf16"}, "8 steps: batches over 2x leave under 4 steps"


def test_two_values_of_one_knob_are_not_combined(tmp_path: Path) -> None:
    runner = FakeRunner({"impl": 1.2})
    _search(tmp_path, {"impl": ["foreach", "fused"]}, runner).run()
    assert set(first_runs(runner.calls)) == {"impl=foreach", "impl=fused"}


def test_a_lower_is_better_metric_that_rises_is_unsafe(tmp_path: Path) -> None:
    def runner(trial: Trial) -> TrialResult:
        return TrialResult(trial.name, trial.knobs, "ok", throughput=150.0 if trial.knobs else 100.0,
                           eval_loss=0.5, eval_metric=0.52 if trial.knobs else 0.50, higher_is_better=False)

    search = _search(tmp_path, {"a": [True]}, runner)
    chosen = search.run()
    assert chosen is not None and chosen.name == "baseline"
    risen = next(r for r in search.results if r.name == "a=True")
    assert risen.status == "unsafe" and (risen.metric_drop or 0) > 0.01


def test_a_metric_that_drops_with_the_same_loss_is_unsafe(tmp_path: Path) -> None:
    def runner(trial: Trial) -> TrialResult:
        return TrialResult(trial.name, trial.knobs, "ok", throughput=150.0 if trial.knobs else 100.0,
                           eval_loss=0.5, eval_metric=0.80 if trial.knobs else 0.90)

    search = _search(tmp_path, {"metric_penalty": [0.1]}, runner)
    assert search.run().name == "baseline"  # type: ignore[union-attr]
    penalized = next(r for r in search.results if r.role == "trial")
    assert penalized.status == "unsafe" and penalized.loss_drift == 0.0 and (penalized.metric_drop or 0) > 0.01


def test_with_ddp_the_hooks_and_bucket_sizes_are_tried_with_it_and_combined(tmp_path: Path) -> None:
    runner = FakeRunner({"ddp": 1.2, "ddp_hook": 1.3, "bucket_mb": 1.1})
    chosen = _search(tmp_path, {"ddp": [2], "ddp_hook": ["powersgd"], "bucket_mb": [5]}, runner).run()
    runs = first_runs(runner.calls)
    assert set(runs[:3]) == {"ddp=2", "ddp=2 + ddp_hook=powersgd", "ddp=2 + bucket_mb=5"}
    assert runs[3:] == ["ddp=2 + ddp_hook=powersgd + bucket_mb=5"], "ddp=2 alone adds nothing to the hook's trial"
    assert chosen is not None and chosen.knobs == {"ddp": 2, "ddp_hook": "powersgd", "bucket_mb": 5}


def test_with_ddp_a_configuration_already_measured_is_never_run_again(tmp_path: Path) -> None:
    """ddp=2 alone is fastest; the hook's trial (ddp=2 + ddp_hook=fp16) helped less, and combining it with ddp=2
    gives that very trial again: it is taken from what was measured, not run (nor listed) a second time."""
    runner = FakeRunner({"ddp": 1.6, "ddp_hook": 0.9, "bucket_mb": 0.9})
    knobs: dict[str, list[object]] = {"ddp": [2], "ddp_hook": ["fp16", "powersgd"], "bucket_mb": [5, 100]}
    search = _search(tmp_path, knobs, runner)
    chosen = search.run()
    runs = first_runs(runner.calls)
    assert sorted(runs) == sorted(["ddp=2", "ddp=2 + ddp_hook=fp16", "ddp=2 + ddp_hook=powersgd",
                                   "ddp=2 + bucket_mb=5", "ddp=2 + bucket_mb=100"])
    assert len({r.name for r in search.results}) == len(search.results) == len(runs) + 2, "+ baseline and seed"
    assert chosen is not None and chosen.knobs == {"ddp": 2}
    assert len(ResultsLog(tmp_path / "r.jsonl").done()) == len(search.results), "each configuration's last line"


def test_fixed_knobs_go_into_every_trial_and_stay_out_of_the_names(tmp_path: Path) -> None:
    runner = FakeRunner({"a": 1.5, "b": 1.2})
    search = _search(tmp_path, {"a": [True], "b": [True]}, runner, fixed={"task": "infer"})
    chosen = search.run()
    assert sorted(first_runs(runner.calls)) == ["a=True", "a=True + b=True", "b=True"]
    assert all(r.knobs["task"] == "infer" for r in search.results)
    assert chosen is not None and chosen.knobs == {"task": "infer", "a": True, "b": True}


def test_a_failed_baseline_ends_the_search_with_no_best(tmp_path: Path) -> None:
    runner = FakeRunner({}, fail=("baseline",))
    assert _search(tmp_path, {"a": [True]}, runner).run() is None
    assert runner.calls == ["baseline"]


def test_a_baseline_whose_loss_is_not_finite_fails_and_cannot_bless_a_trial() -> None:
    nan = float("nan")
    baseline = judge(TrialResult("baseline", {}, "ok", throughput=10.0, eval_loss=nan), None)
    assert baseline.status == "failed" and "not finite" in (baseline.error or "")
    fine = TrialResult("baseline", {}, "ok", throughput=10.0, eval_loss=nan)  # as read back from an old file
    trial = judge(TrialResult("amp", {"amp": "bf16"}, "ok", throughput=20.0, eval_loss=123.0), fine)
    assert trial.status == "unsafe" and trial.loss_drift == float("inf")


def test_best_is_the_fastest_safe_trial_and_a_gain_within_the_noise_keeps_the_baseline() -> None:
    baseline = TrialResult("baseline", {}, "ok", throughput=100.0, speedup=1.0)
    noise = TrialResult("a", {"a": 1}, "ok", throughput=102.0, speedup=1.02)
    unsafe = TrialResult("b", {"b": 1}, "unsafe", throughput=900.0, speedup=9.0)
    faster = TrialResult("c", {"c": 1}, "ok", throughput=150.0, speedup=1.5)
    assert best([baseline, noise, unsafe]) is baseline
    assert best([baseline, noise, unsafe, faster]) is faster
    assert best([TrialResult("baseline", {}, "oom")]) is None


STAGES = StagePlan((
    Stage("naive", "baseline", {}),
    Stage("+ batched", "data", {"batched": True}),
    Stage("+ big batch", "compute", {"batch_size": 2048}),
    Stage("+ workers", "data", {"num_workers": 1}),
))


def test_stages_are_cumulative_and_an_unsafe_stage_is_not_carried(tmp_path: Path) -> None:
    runner = FakeRunner({"batched": 2.0, "batch_size": 1.5, "num_workers": 1.2}, probe={"batch_size": 0.9})
    search = Search(STAGES, ResultsLog(tmp_path / "stages.jsonl"), runner)
    chosen = search.run()
    staged = [r for r in search.results if r.role != "seed"]
    assert [r.knobs for r in staged] == [{}, {"batched": True}, {"batched": True, "batch_size": 2048},
                                         {"batched": True, "num_workers": 1}]
    assert [r.status for r in staged] == ["ok", "ok", "unsafe", "ok"]
    assert [r.stage for r in staged] == ["baseline", "data", "compute", "data"]
    assert staged[3].speedup == pytest.approx(2.4), "each stage is judged against the naive baseline"
    assert chosen is staged[3] and chosen.rounds == 4, "confirmed by three A/B rounds"


def test_stages_resume_from_the_file_and_a_failed_baseline_stops_them(tmp_path: Path) -> None:
    runner = FakeRunner({"batched": 2.0})
    log = ResultsLog(tmp_path / "stages.jsonl")
    first = Search(STAGES, log, runner)
    first.run()
    runner.calls.clear()
    again = Search(STAGES, log, runner)
    again.run()
    assert runner.calls == [], "every stage came from the file"
    assert [r.to_dict() for r in again.results] == [r.to_dict() for r in first.results]
    broken = FakeRunner({}, fail=("naive",))
    assert Search(STAGES, ResultsLog(tmp_path / "broken.jsonl"), broken).run() is None
    assert broken.calls == ["naive"], "nothing to compare against"


def test_each_result_is_reported_as_it_is_decided(tmp_path: Path) -> None:
    seen: list[str] = []
    search = _search(tmp_path, {"a": [True]}, FakeRunner({"a": 1.5}), on_result=lambda r: seen.append(r.name))
    search.run()
    assert seen == ["baseline", "baseline (seed 1)", "a=True"]
    assert search.plan.expected_trials() == 2


SLOWING = StagePlan((
    Stage("naive", "baseline", {}),
    Stage("+ batched", "data", {"batched": True}),
    Stage("+ workers", "data", {"num_workers": 1}),
    Stage("+ ddp", "communication", {"ddp": 2}),
    Stage("+ fused", "compute", {"fused": True}),
))


def test_a_stage_slower_than_the_chain_beyond_the_noise_is_shown_and_not_built_on(tmp_path: Path) -> None:
    from tests.tune.fakes import FakeMachine

    machine = FakeMachine({"batched": 3.0, "num_workers": 0.45, "ddp": 0.8, "fused": 1.0}, noise=0.01)
    search = Search(SLOWING, ResultsLog(tmp_path / "stages.jsonl"), machine)
    search.run()
    staged = {r.name: r for r in search.results if r.role == "trial"}
    assert staged["+ workers"].knobs == {"batched": True, "num_workers": 1}
    assert staged["+ ddp"].knobs == {"batched": True, "ddp": 2}, "built on the last stage kept, not the slower one"
    assert staged["+ fused"].knobs == {"batched": True, "fused": True}, "DDP was slower too"
    assert "slower than the stage it built on" in (staged["+ workers"].dropped or "")
    assert staged["+ ddp"].dropped is not None and staged["+ batched"].dropped is None
    assert staged["+ fused"].dropped is None, "as fast as the stage it built on, within the noise: kept"
    rows = {r["configuration"]: r for r in (s.to_dict() for s in search.results)}
    assert rows["+ workers"]["kept"] is False and rows["+ batched"]["kept"] is True


def test_an_unsafe_stage_says_it_is_not_built_on(tmp_path: Path) -> None:
    runner = FakeRunner({"batched": 2.0, "batch_size": 1.5, "num_workers": 1.2}, probe={"batch_size": 0.9})
    search = Search(STAGES, ResultsLog(tmp_path / "stages.jsonl"), runner)
    search.run()
    unsafe = next(r for r in search.results if r.status == "unsafe")
    assert unsafe.dropped == "unsafe" and unsafe.verdict == "unsafe"


def test_stages_whose_accuracy_cannot_be_judged_are_unjudged_never_safe(tmp_path: Path) -> None:
    """Two seeds of the baseline 10% apart: a stage that drifts 4% is not called unsafe, nor safe; the rows say
    why, and the run names no winner."""
    from tests.tune.fakes import FakeMachine

    machine = FakeMachine({"batched": 2.0, "batch_size": 1.5, "num_workers": 1.2}, costs={"batch_size": 0.02},
                          steps=40, seed_spread=2.0)
    search = Search(STAGES, ResultsLog(tmp_path / "stages.jsonl"), machine)
    assert search.run() is None
    trials = [r for r in search.results if r.role == "trial"]
    assert len(trials) == 3 and all(r.status == "ok" for r in trials), "every stage still runs and is shown"
    assert [r.verdict for r in trials] == ["unjudged"] * 3
    assert {r.unjudged for r in trials} == {"seeds 10.0% apart"}
    assert trials[1].loss_drift == pytest.approx(0.04)
    assert all(r.to_dict()["verdict"] == "unjudged" for r in trials)
    assert search.decision().verdict == "undecided"
    resumed = Search(STAGES, ResultsLog(tmp_path / "stages.jsonl"), machine)
    resumed.run()
    assert [r.verdict for r in resumed.results if r.role == "trial"] == ["unjudged"] * 3, "kept in the file"


def test_a_judged_stage_is_safe_and_a_drifted_one_unsafe(tmp_path: Path) -> None:
    from tests.tune.fakes import FakeMachine

    machine = FakeMachine({"batched": 2.0, "batch_size": 1.5, "num_workers": 1.2}, costs={"batch_size": 0.02},
                          steps=40, seed_spread=0.01)
    search = Search(STAGES, ResultsLog(tmp_path / "stages.jsonl"), machine)
    search.run()
    assert [r.verdict for r in search.results] == ["baseline", "seed", "safe", "unsafe", "safe"]


def test_a_resumed_run_keeps_the_chain_its_first_run_built_however_the_noise_floor_moved_since(
        tmp_path: Path) -> None:
    from tests.tune.fakes import FakeMachine

    machine = FakeMachine({"batched": 3.0, "num_workers": 0.45, "ddp": 0.8, "fused": 1.0}, noise=0.01)
    baseline_runs = 0

    def loaded_late(trial: Trial) -> TrialResult:
        """The machine's baseline runs swing wildly once the stages have run (the A/B rounds' baseline runs): the
        noise floor at the end is far above the one each stage was judged at."""
        nonlocal baseline_runs
        result = machine(trial)
        if not trial.knobs and trial.seed == 0:
            baseline_runs += 1
            if baseline_runs > 4 and result.throughput is not None:
                result.throughput *= (0.2, 3.0)[baseline_runs % 2]
        return result

    log = ResultsLog(tmp_path / "stages.jsonl")
    first = Search(SLOWING, log, loaded_late)
    first.run()
    assert first.baseline is not None and (first.baseline.noise_floor or 0.0) > 0.5, "the floor rose after the stages"
    decided = {r.name: (r.knobs, r.dropped) for r in first.results if r.role == "trial"}
    assert "slower than the stage it built on" in (decided["+ workers"][1] or ""), "judged at the floor of its time"
    machine.runs.clear()
    again = Search(SLOWING, log, loaded_late)
    again.run()
    assert machine.runs == [], "nothing ran again: every stage, built on the same chain, came from the file"
    assert {r.name: (r.knobs, r.dropped) for r in again.results if r.role == "trial"} == decided


def test_a_resumed_greedy_search_combines_as_its_first_run_did_whatever_the_a_b_rounds_found_later(
        tmp_path: Path) -> None:
    runner = FakeRunner({"a": 1.5, "b": 1.3, "c": 1.2})
    seen: dict[str, int] = {}

    def slower_when_confirmed(trial: Trial) -> TrialResult:
        """a + b runs slower in its A/B rounds than in the search: confirmed, it falls below a alone."""
        result = runner(trial)
        seen[trial.key] = seen.get(trial.key, 0) + 1
        if set(trial.knobs) == {"a", "b"} and seen[trial.key] > 1 and result.throughput is not None:
            result.throughput *= 0.6
        return result

    log = ResultsLog(tmp_path / "r.jsonl")
    first = Search(GreedyPlan({"a": [True], "b": [True], "c": [True]}), log, slower_when_confirmed)
    first.run()
    confirmed = next(r for r in first.results if set(r.knobs) == {"a", "b"})
    assert confirmed.rounds > 1 and (confirmed.speedup or 0) < 1.5 < (confirmed.search_speedup or 0)
    ran = {r.name for r in first.results}
    runner.calls.clear()
    again = Search(GreedyPlan({"a": [True], "b": [True], "c": [True]}), log, slower_when_confirmed)
    again.run()
    assert runner.calls == [], ("nothing ran again: the combinations are the first run's, from the file", runner.calls)
    assert {r.name for r in again.results} == ran
