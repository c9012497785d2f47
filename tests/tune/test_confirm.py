"""The tuner confirms before it claims: each guard shown on a fake machine whose truth is known (no training, no
clock): a known speedup under noise is found with an interval that holds it; a noisy machine names no winner; a
knob that costs accuracy is rejected at every step count the tuner accepts; a machine that slows down over the
run favours no trial for its place in the order."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.tune import GreedyPlan, ResultsLog, Search, best
from gpufly.tune.trial import TrialResult
from gpufly.tune.verdict import decide
from tests.tune.fakes import FakeMachine


def _tune(tmp_path: Path, knobs: dict[str, list[object]], machine: FakeMachine, name: str = "r") -> Search:
    search = Search(GreedyPlan(knobs), ResultsLog(tmp_path / f"{name}.jsonl"), machine)
    search.run()
    return search


@pytest.mark.parametrize("rng_seed", range(5))
def test_a_known_speedup_under_noise_is_found_with_an_interval_that_holds_it(tmp_path: Path, rng_seed: int) -> None:
    machine = FakeMachine({"fast": 1.25, "same": 1.0, "slow": 0.8}, noise=0.02, rng_seed=rng_seed)
    search = _tune(tmp_path, {"fast": [True], "same": [True], "slow": [True]}, machine)
    decision = search.decision()
    assert decision.verdict == "faster" and decision.winner is not None
    winner = decision.winner
    assert winner.knobs == {"fast": True} and winner.rounds == 4, "the search's run and three A/B rounds"
    assert winner.speedup_low is not None and winner.speedup_high is not None
    assert winner.speedup_low <= 1.25 <= winner.speedup_high and winner.speedup_low > 1.0
    assert machine.runs.count("fast=True") == 4
    baseline = search.baseline
    assert baseline is not None and len(baseline.throughputs) >= 6, "the baseline ran through the whole search"
    assert baseline.noise_floor is not None and 0.0 < baseline.noise_floor < 0.05


def test_the_speedup_and_its_interval_are_in_the_file_and_read_back_the_same(tmp_path: Path) -> None:
    machine = FakeMachine({"fast": 1.25}, noise=0.02)
    search = _tune(tmp_path, {"fast": [True]}, machine)
    done = list(ResultsLog(tmp_path / "r.jsonl").done().values())
    chosen = best(done)
    assert chosen is not None and chosen.to_dict() == search.decision().winner.to_dict()  # type: ignore[union-attr]
    assert decide(done).reason == search.decision().reason


def test_on_a_noisy_machine_the_tuner_names_no_winner_and_says_why(tmp_path: Path) -> None:
    machine = FakeMachine({"fast": 1.25, "same": 1.0}, noise=0.3)
    search = _tune(tmp_path, {"fast": [True], "same": [True]}, machine)
    decision = search.decision()
    assert decision.verdict == "too noisy" and decision.winner is None
    assert "too noisy" in decision.reason and "varied" in decision.reason
    assert best(search.results) is None


def test_a_gain_within_the_noise_is_not_named(tmp_path: Path) -> None:
    """Nothing is really faster; noise alone makes some trial look faster in the search, and the A/B rounds do
    not confirm it."""
    machine = FakeMachine({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}, noise=0.05, rng_seed=3)
    search = _tune(tmp_path, {"a": [True], "b": [True], "c": [True], "d": [True]}, machine)
    decision = search.decision()
    assert decision.verdict in ("no gain", "undecided")
    assert decision.winner is None or decision.winner.role == "baseline"


@pytest.mark.parametrize("steps", [4, 8, 16, 40, 160, 640])
def test_a_knob_that_costs_accuracy_is_rejected_at_any_step_count_the_tuner_accepts(tmp_path: Path,
                                                                                      steps: int) -> None:
    """The seed moves the probe loss by 2/steps (20% of it after 20 steps, 0.6% after 640); the lossy knob
    costs 5% of it and is twice as fast. Where the seeds disagree the run says it cannot judge accuracy; where it
    judges, the knob is unsafe: never chosen, whatever --steps."""
    machine = FakeMachine({"lossy": 2.0, "fine": 1.2}, costs={"lossy": 0.025}, steps=steps, seed_spread=1.0)
    search = _tune(tmp_path, {"lossy": [True], "fine": [True]}, machine)
    decision = search.decision()
    lossy = next((r for r in search.results if r.name == "lossy=True"), None)
    if decision.verdict == "undecided":
        assert "too few steps to judge accuracy" in decision.reason and decision.winner is None
        assert lossy is None and len(machine.runs) == 2, "the baseline's two seeds, then nothing to judge with"
    else:
        assert lossy is not None and lossy.status == "unsafe"
        assert decision.winner is not None and decision.winner.knobs == {"fine": True}
    assert decision.winner is None or decision.winner.knobs != {"lossy": True}


def test_the_accuracy_test_is_accepted_once_the_seeds_agree(tmp_path: Path) -> None:
    verdicts = {}
    for steps in (8, 640):
        machine = FakeMachine({"fine": 1.2}, steps=steps, seed_spread=1.0)
        verdicts[steps] = _tune(tmp_path, {"fine": [True]}, machine, name=f"s{steps}").decision().verdict
    assert verdicts == {8: "undecided", 640: "faster"}


@pytest.mark.parametrize("drift", [0.01, -0.01])
def test_a_machine_that_drifts_over_the_run_favours_no_place_in_the_order(tmp_path: Path, drift: float) -> None:
    """Each run is 1% slower (or faster) than the last: over a dozen trials a one-after-the-other comparison would
    make the last trial 10% slower than the first. Against the baseline interpolated around each trial, every
    knob of no effect measures 1x, first or last."""
    knobs: dict[str, list[object]] = {name: [True] for name in "abcdefgh"}
    machine = FakeMachine({}, drift=drift)
    search = _tune(tmp_path, knobs, machine)
    trials = [r for r in search.results if r.role == "trial"]
    assert len(trials) == 8
    for trial in trials:
        assert trial.speedup == pytest.approx(1.0, abs=0.006), trial.name
    assert search.decision().verdict == "no gain"


def test_the_single_knobs_run_in_a_shuffled_order_that_a_resumed_run_repeats(tmp_path: Path) -> None:
    knobs: dict[str, list[object]] = {name: [True] for name in "abcdefgh"}
    first, again = FakeMachine({}), FakeMachine({})
    _tune(tmp_path, knobs, first, name="one")
    _tune(tmp_path, knobs, again, name="two")
    order = [name for name in dict.fromkeys(first.runs) if "=" in name]
    assert order != sorted(order), "not the order the knobs were listed in"
    assert order == [name for name in dict.fromkeys(again.runs) if "=" in name]


def _confirmed_result(name: str, knobs: dict[str, object], speedup: float, low: float, high: float,
                      drift: float | None) -> TrialResult:
    return TrialResult(name, knobs, "ok", throughput=100.0 * speedup, speedup=speedup, speedup_low=low,
                       speedup_high=high, rounds=4, loss_drift=drift)


def _baseline() -> TrialResult:
    return TrialResult("baseline", {}, "ok", throughput=100.0, role="baseline", throughputs=[99.0, 100.0, 101.0],
                       noise_floor=0.01, seed_loss_drift=0.003, eval_loss=0.5, loss_drift=0.0, speedup=1.0)


def test_winners_the_rounds_cannot_rank_are_split_by_the_smaller_drift_and_the_tie_is_said() -> None:
    tied = [_confirmed_result("batch 2048", {"batch": 2048}, 31.6, 29.3, 34.0, drift=-0.011),
            _confirmed_result("batch 1024", {"batch": 1024}, 27.3, 25.0, 29.9, drift=0.004)]
    decision = decide([_baseline(), *tied])
    assert decision.verdict == "faster" and decision.winner is not None and decision.winner.name == "batch 1024"
    assert "cannot rank" in decision.reason and "batch 2048 31.60x [29.30-34.00]" in decision.reason
    assert "0.40% drift" in decision.reason
    assert decision.tie_break is not None and decision.to_dict()["tie_break"] == decision.tie_break


def test_winners_alike_in_speed_and_drift_name_no_winner() -> None:
    tied = [_confirmed_result("a", {"x": 1}, 2.0, 1.8, 2.2, drift=None),
            _confirmed_result("b", {"y": 1}, 2.1, 1.9, 2.3, drift=0.01)]
    decision = decide([_baseline(), *tied])
    assert decision.verdict == "undecided" and decision.winner is None and decision.tie_break is None
    assert "cannot tell these apart" in decision.reason


def test_the_tune_summary_says_why_a_tied_winner_was_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpufly.cli.tune import _conclude

    tied = [_confirmed_result("batch 2048", {"batch": 2048}, 31.6, 29.3, 34.0, drift=-0.011),
            _confirmed_result("batch 1024", {"batch": 1024}, 27.3, 25.0, 29.9, drift=0.004)]
    decision = decide([_baseline(), *tied])
    _conclude(decision, decision.winner, {"noise": None, "accuracy": None}, tmp_path / "r.jsonl", stages_run=True)
    out = capsys.readouterr().out
    assert "best safe stage: batch 1024, 27.30x" in out
    assert "why this one: the rounds cannot rank it against the others" in out
