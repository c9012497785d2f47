"""What a row of the tuner's table shows can be checked by its reader: every timed figure of a row comes from one
run (never a median no run produced beside another run's figures), the speedup is the ratio of two figures the row
shows, and the baseline's spread is said in throughputs, not only as a statistic. Fake machines, no clock."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpufly.tune import GreedyPlan, ResultsLog, Search, TrialResult
from gpufly.tune.verdict import decide
from tests.tune.fakes import FakeMachine


def _tune(tmp_path: Path, machine: FakeMachine, knobs: dict[str, list[Any]] | None = None) -> Search:
    search = Search(GreedyPlan(knobs or {"fast": [True], "same": [True]}), ResultsLog(tmp_path / "r.jsonl"), machine)
    search.run()
    return search


def _figures(result: TrialResult) -> tuple[Any, ...]:
    return (result.throughput, result.median_step_throughput, result.seconds, result.data_wait_share)


@pytest.mark.parametrize("rng_seed", range(3))
def test_the_baseline_row_and_a_confirmed_row_show_one_run_s_figures(tmp_path: Path, rng_seed: int) -> None:
    """The probe's case: the baseline's throughput was the median of its runs (a value no run produced) while its
    median-step rate and seconds were its first run's. Every figure of the row now comes from its median run."""
    machine = FakeMachine({"fast": 1.25, "same": 1.0}, noise=0.03, timed=True, rng_seed=rng_seed)
    search = _tune(tmp_path, machine)
    baseline = search.baseline
    assert baseline is not None
    own_runs = [r for r in machine.results if r.name == "baseline" and r.seed == 0]
    assert baseline.median_step_throughput == pytest.approx(1.5 * (baseline.throughput or 0.0))
    assert _figures(baseline) in [_figures(r) for r in own_runs], "all of the row's figures from one of its runs"
    assert len(own_runs) >= 4 and len(baseline.runs) == len(own_runs)
    ordered = sorted(r.throughput or 0.0 for r in own_runs)
    assert baseline.throughput == ordered[(len(ordered) - 1) // 2], "the median run (the lower middle one)"
    assert baseline.shown_run is not None and baseline.runs[baseline.shown_run - 1].throughput == baseline.throughput
    winner = search.decision().winner
    assert winner is not None and winner.rounds == 4 and len(winner.runs) == 4
    assert _figures(winner) in [_figures(r) for r in machine.results if r.name == winner.name]
    again = ResultsLog(tmp_path / "r.jsonl").done()
    assert {_figures(r) for r in again.values()} >= {_figures(baseline), _figures(winner)}, "the file says the same"


def test_each_speedup_is_the_ratio_of_the_two_figures_its_row_shows(tmp_path: Path) -> None:
    """The probe's case: num_workers=2 at 30 samples/s against a baseline row of 88 read 0.95x, since it was compared
    with the baseline measured beside it; the row now shows that baseline figure. On a machine that slows down 1% a
    run, the baseline beside an early trial is far from the baseline's row, and the speedup still derives."""
    machine = FakeMachine({name: 1.0 for name in "abcdef"} | {"fast": 1.5}, drift=0.01, timed=True)
    search = _tune(tmp_path, machine, {name: [True] for name in [*"abcdef", "fast"]})
    baseline = search.baseline
    assert baseline is not None
    trials = [r for r in search.results if r.role == "trial"]
    assert trials and all(r.paired_throughput and r.paired_baseline for r in trials)
    for trial in trials:
        assert trial.speedup == pytest.approx((trial.paired_throughput or 0) / (trial.paired_baseline or 1))
    early = trials[0]
    assert abs((early.paired_baseline or 0) / (baseline.throughput or 1) - 1) > 0.05, "not the baseline row's figure"
    confirmed = [r for r in trials if r.rounds > 1]
    assert confirmed and all(r.pairs == r.rounds for r in confirmed), "geometric means of the paired runs"


def test_the_noisy_verdict_says_how_far_apart_the_baseline_runs_were(tmp_path: Path) -> None:
    """"varied 117.1%" was the standard deviation of the log throughput while the runs differed 8.3x: the reason now
    gives the lowest and highest run, their ratio, and names the statistic."""
    baseline = TrialResult("baseline", {}, "ok", throughput=18894.0, role="baseline", eval_loss=0.5,
                           throughputs=[4786.0, 33000.0, 33677.0, 4043.0], noise_floor=1.171, speedup=1.0)
    decision = decide([baseline])
    assert decision.verdict == "too noisy"
    assert "from 4,043 to 33,677 samples/s over 4 runs (8.33x apart)" in decision.reason
    assert "noise floor (standard deviation of the log throughput) of 117.1%" in decision.reason


@pytest.fixture
def fake_machine(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeMachine]:
    import gpufly.tune
    import gpufly.tune.workload
    from gpufly.tune.workload import SearchSpace

    def use(speeds: dict[str, float], **machine: Any) -> FakeMachine:
        fake = FakeMachine(speeds, **machine)
        monkeypatch.setattr(gpufly.tune.workload, "search_space",
                            lambda *args: SearchSpace({name: [True] for name in speeds}, False))
        monkeypatch.setattr(gpufly.tune, "SubprocessRunner", lambda *args: fake)
        return fake

    return use


def test_text_json_and_page_show_one_run_per_row_the_ratio_behind_each_speedup_and_the_spread(
        cli: Any, tmp_path: Path, fake_machine: Callable[..., FakeMachine]) -> None:
    machine = fake_machine({"fast": 1.25, "same": 1.0}, noise=0.02, seed_spread=0.02, timed=True)
    results, page = tmp_path / "r.jsonl", tmp_path / "p.html"
    text = cli("tune", "cnn", "--results", str(results), "--device", "cpu", "--html", str(page))
    assert text.code == 0, text.stderr
    out = " ".join(text.stdout.split())
    assert "trial / baseline" in out and "beside it" in out
    runs = [r.throughput or 0.0 for r in machine.results if r.name.startswith("baseline")]
    low, high = min(runs), max(runs)
    assert f"noise: the baseline ran {len(runs)} times through the run: {low:,.0f}-{high:,.0f} samples/s" in out
    assert "noise floor (standard deviation of the log throughput)" in out and "its median run" in out
    seed_zero = [r for r in machine.results if r.name == "baseline"]
    assert len(runs) > len(seed_zero), "the second seed's run is among the baseline's"
    assert f"(the other {len(runs) - len(seed_zero)} with seed 1, the seed-drift check)" in out, out
    document = json.loads(cli("tune", "cnn", "--results", str(results), "--resume", "--json").stdout)
    rows = {r["configuration"]: r for r in document["trials"]}
    base = rows["baseline"]
    assert base["median_step_throughput"] == pytest.approx(1.5 * base["throughput"]), "one run's figures"
    assert base["runs"][base["shown_run"] - 1]["throughput"] == base["throughput"]
    for row in document["trials"]:
        if row["role"] == "trial" and row["speedup"] is not None:
            assert row["speedup"] == pytest.approx(row["paired_throughput"] / row["paired_baseline"])
            assert re.search(rf"{row['paired_throughput']:,.0f} / {row['paired_baseline']:,.0f}", out), row
    assert document["noise"]["range"] == [low, high]
    body = " ".join(page.read_text().split())
    assert "trial / baseline beside it" in body and "4,043" not in body
    fast = rows["fast=True"]
    assert f"<td>{fast['paired_throughput']:,.0f} / {fast['paired_baseline']:,.0f}</td>" in body
    assert f"{low:,.0f}-{high:,.0f} samples/s" in body
