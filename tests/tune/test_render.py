"""The tuner's HTML page: one bar per measured trial, scaled to its speedup, the best one marked."""

from __future__ import annotations

import math
import re
from html import unescape

from gpufly.tune.render import page, speedup_chart, verdict_text


def _row(name: str, status: str, speedup: float | None) -> dict[str, object]:
    return {"configuration": name, "status": status, "speedup": speedup, "throughput": None if speedup is None
            else 100 * speedup, "unit": "samples", "loss_drift": 0.0, "error": "boom" if speedup is None else None}


ROWS = [_row("baseline", "ok", 1.0), _row("sparse=True", "ok", 4.0), _row("amp=bf16", "unsafe", 2.0),
        _row("batch_size=1024", "oom", None)]


def test_bars_run_from_1x_to_each_speedup_on_one_log_scale_and_failures_have_none() -> None:
    svg = speedup_chart(ROWS, best="sparse=True")
    pattern = r'data-status="(\w+)" x="[\d.]+" y="[\d.]+" width="([\d.]+)"'
    widths = {status: float(w) for status, w in re.findall(pattern, svg)}
    bars = re.findall(r'data-speedup="([\d.]+)"[^>]*width="([\d.]+)"', svg)
    assert [float(s) for s, _ in bars] == [1.0, 4.0, 2.0]
    assert {round(float(w) / math.log(float(s)), 1) for s, w in bars if float(s) != 1.0} == {
        round(float(bars[1][1]) / math.log(4.0), 1)}, "one log scale for every bar"
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
    assert ("device cpu (2 threads); 40 steps per trial; the baseline ran 7 times through the run: 1-1 samples/s "
            "(1.00x apart); noise floor (standard deviation of the log throughput) 11.9%" in html)
    assert ("accuracy judged after 40 steps; two seeds of the baseline: probe loss 20.0% apart (too far to judge); "
            "metric 0.0% apart (judged)" in html), "the metric judged, the probe loss could not"
    assert "conditions not recorded" in page("cnn", ROWS, None, "trials.jsonl")
    unjudged = {**receipt, "accuracy": {"steps": 40, "seed_loss_drift": 0.2, "loss_judged": False}}
    assert ("accuracy not judged after 40 steps; two seeds of the baseline: probe loss 20.0% apart (too far to judge)"
            in unescape(page("cnn", ROWS, None, "t.jsonl", None, unjudged)))


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


def _interval_row(name: str, speedup: float, low: float, high: float, verdict: str = "safe") -> dict[str, object]:
    return {**_row(name, "ok", speedup), "role": "trial", "verdict": verdict, "speedup_interval": [low, high]}


def test_the_chart_has_a_log_axis_with_ticks_a_label_inside_and_a_whisker_per_interval() -> None:
    """The probe's page: one tick (1x), no axis line, the axis label a <p> under the SVG and no whiskers, though the
    table printed 0.56x [0.00-1032.29]."""
    rows = [{**_row("baseline", "ok", 1.0), "role": "baseline"}, _interval_row("optimizer_impl=fused", 0.56, 0.004,
                                                                               1032.29),
            _interval_row("batch_size=128", 3.11, 1.9, 4.2, "unsafe")]
    svg = speedup_chart(rows, best=None)
    assert svg.count('class="axis"') == 1
    ticks = [float(t) for t in re.findall(r'class="tick-label"[^>]*>([\d.]+)x<', svg)]
    assert len(ticks) >= 3 and 1.0 in ticks and ticks == sorted(ticks)
    steps = {round(math.log10(t) % 1, 3) for t in ticks}
    assert steps <= {0.0, round(math.log10(2), 3), round(math.log10(5), 3)}, "1-2-5 ticks on a log scale"
    label = re.search(r'<text class="axis-label".*?</text>', svg)
    assert label is not None and "log scale" in label.group(0) and "95% interval" in label.group(0)
    assert svg.index('class="axis-label"') < svg.index("</svg>"), "the label is inside the SVG"
    whiskers = re.findall(r'class="interval" data-low="([\d.]+)" data-high="([\d.]+)" data-clamped="([a-z ]+)"', svg)
    assert whiskers == [("0.0040", "1032.2900", "low high"), ("1.9000", "4.2000", "none")]
    assert svg.count('class="clamped"') == 2 and svg.count('class="cap"') == 2
    low_end, high_end = min(ticks), max(ticks)
    xs = [float(x) for x in re.findall(r'class="interval"[^>]* x1="([\d.]+)"', svg)]
    tick_x = {float(t): float(x) for x, t in re.findall(r'class="tick-label" x="([\d.]+)"[^>]*>([\d.]+)x<', svg)}
    assert min(xs) >= tick_x[low_end] - 0.01 and low_end > 0.004 and high_end < 1032, "clamped to the drawn axis"
    assert "0.56x [0.00-1032.29]" in svg, "each row's figure and interval beside it"


def test_long_labels_wrap_and_end_at_a_word_boundary_with_the_full_name_in_the_tooltip() -> None:
    name = "optimizer_impl=foreach + amp=bf16 + channels_last=True + num_workers=2 + batch_size=128 + compile=default"
    svg = speedup_chart([_interval_row(name, 1.2, 1.1, 1.3)], best=name)
    lines = re.findall(r"<tspan x=\"\d+\" dy=\"\d+\">([^<]*)</tspan>", svg)
    assert 1 < len(lines) <= 2 and lines[-1].endswith("…")
    words = name.split()
    shown = " ".join(lines).removesuffix("…").split()
    assert shown == words[:len(shown)], "whole words, in order, none cut"
    assert f"<title>{name}</title>" in svg


def test_the_page_says_what_decided_each_verdict_and_when_accuracy_was_not_judged() -> None:
    receipt = {"device": "cpu", "steps": 8, "accuracy": {"steps": 8, "seed_loss_drift": None,
                                                         "seed_metric_drift": None, "loss_judged": True,
                                                         "metric_judged": False}}
    unsafe = {**_interval_row("batch_size=128", 3.11, 1.9, 4.2, "unsafe"), "metric_drop": 0.275,
              "unsafe_because": "metric dropped 27.5%"}
    html = unescape(page("cnn", [*ROWS[:1], unsafe], None, "t.jsonl", "No winner", receipt))
    assert "accuracy judged after 8 steps with fixed tolerances" in html and "against two seeds" not in html
    assert "unsafe: metric dropped 27.5%" in html and "<td>27.50%</td>" in html, "the figure that decided it"
    unjudged = {**receipt, "accuracy": {"steps": 40, "seed_loss_drift": 0.101, "seed_metric_drift": 0.078,
                                        "loss_judged": False, "metric_judged": False}}
    html = unescape(page("recsys", ROWS, None, "t.jsonl", "No winner", unjudged))
    assert ("accuracy not judged after 40 steps; two seeds of the baseline: probe loss 10.1% apart (too far to judge);"
            " metric 7.8% apart (too far to judge)") in html


def test_failure_reasons_are_shown_whole_and_only_ever_cut_at_a_word() -> None:
    """The probe's case: the reason was cut at 60 characters, mid-word ("... the workload sets its own seed, s")."""
    from gpufly.cli.tune import _verdict
    from gpufly.tune.trial import Trial, clip, outcome

    error = "the same losses as seed 0: the workload sets its own seed, so no seed drift is known"
    row = {**_row("baseline (seed 1)", "ok", None), "role": "seed", "verdict": "seed", "error": error}
    assert verdict_text(row) == f"baseline, second seed: {error}" == _verdict(row)
    assert clip(error, 60) == "the same losses as seed 0: the workload sets its own seed…"
    long = "RuntimeError: " + " ".join(["something went wrong"] * 40)
    failed = outcome(Trial("x", {}), 1, "", long, 1.0)
    assert failed.error is not None and len(failed.error) <= 300 and failed.error.endswith("…")
    assert set(failed.error.removesuffix("…").split()[1:]) == {"something", "went", "wrong"}, "whole words only"
