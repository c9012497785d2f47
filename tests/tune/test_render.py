"""The tuner's HTML page: one bar per measured trial, scaled to its speedup, the best one marked."""

from __future__ import annotations

import re
from html import unescape

from gpufly.tune.render import page, speedup_chart


def _row(name: str, status: str, speedup: float | None) -> dict[str, object]:
    return {"configuration": name, "status": status, "speedup": speedup, "throughput": None if speedup is None
            else 100 * speedup, "unit": "samples", "loss_drift": 0.0, "error": "boom" if speedup is None else None}


ROWS = [_row("baseline", "ok", 1.0), _row("sparse=True", "ok", 4.0), _row("amp=bf16", "unsafe", 2.0),
        _row("batch_size=1024", "oom", None)]


def test_bars_are_proportional_to_the_speedups_and_failures_have_none() -> None:
    svg = speedup_chart(ROWS, best="sparse=True")
    pattern = r'data-status="(\w+)" x="\d+" y="\d+" width="([\d.]+)"'
    widths = {status: float(w) for status, w in re.findall(pattern, svg)}
    bars = re.findall(r'data-speedup="([\d.]+)"[^>]*width="([\d.]+)"', svg)
    assert [float(s) for s, _ in bars] == [1.0, 4.0, 2.0]
    ratios = {round(float(w) / float(s), 3) for s, w in bars}
    assert len(ratios) == 1, "one scale for every bar"
    assert set(widths) == {"ok", "unsafe"} and "sparse=True (best)" in svg


def test_the_page_has_the_table_and_the_code() -> None:
    best = {"configuration": "sparse=True", "speedup": 4.0, "code": ["workload option: sparse=True"]}
    html = page("recsys", ROWS, best, "trials.jsonl")
    assert html.count("<tr><td>") == 4 and "oom: boom" in html and "4.00x the baseline" in html
    assert "workload option: sparse=True" in html and "<script" not in html
    assert "failed; nothing to compare" in page("x", ROWS[:1], None, "t.jsonl")
    assert "No trial measured" in speedup_chart([ROWS[3]], best=None)


def test_the_page_records_the_device_the_steps_and_the_noise_floor() -> None:
    receipt = {"device": "cpu (2 threads)", "steps": 40,
               "noise": {"baseline_runs": 7, "noise_floor": 0.119, "throughputs": [1.0] * 7},
               "accuracy": {"steps": 40, "seed_loss_drift": 0.2, "seed_metric_drift": 0.0}}
    html = unescape(page("cnn", ROWS, None, "trials.jsonl", "No winner (too noisy): ...", receipt))
    assert ("device cpu (2 threads); 40 steps per trial; noise floor 11.9% (the baseline's throughput over 7 runs"
            in html)
    assert "accuracy judged after 40 steps" in html and "Horizontal axis: throughput relative to the baseline" in html
    assert "conditions not recorded" in page("cnn", ROWS, None, "trials.jsonl")
    unjudged = {**receipt, "accuracy": {"steps": 40, "loss_judged": False, "metric_judged": False}}
    assert "accuracy not judged: after 40 steps two seeds" in unescape(page("cnn", ROWS, None, "t.jsonl", None,
                                                                             unjudged))


def test_the_page_records_versions_and_batch_and_says_which_trials_were_not_judged() -> None:
    receipt = {"device": "cpu", "versions": {"torch": "2.5.1", "python": "3.11.7", "gpufly": "0.1.0"}, "steps": 40,
               "batch_size": 256}
    rows = [*ROWS, {**_row("batch_size=2048", "ok", 3.0), "role": "trial", "verdict": "unjudged",
                    "unjudged": "seeds 10.1% apart", "dropped": "slower than the stage it built on (1.00x after "
                                                               "3.00x)"}]
    html = unescape(page("recsys", rows, None, "trials.jsonl", "No winner", receipt))
    assert ("device cpu; torch 2.5.1; Python 3.11.7; gpufly 0.1.0; 40 steps per trial; batch 256 (the baseline's)"
            in html)
    assert ("unjudged: accuracy not judged, seeds 10.1% apart; not built on: slower than the stage it built on"
            in html)
    assert 'data-verdict="unjudged"' in html and 'data-verdict="safe"' in html and "unsafe: loss drifted" in html
