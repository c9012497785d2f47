"""`gpufly profile`: a script unchanged, module:function, a crash that keeps its measurements, JSON, HTML, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "fixtures" / "profile" / "train_script.py"


def test_a_script_is_profiled_without_a_code_change(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("profile", "--json", str(SCRIPT), "--steps", "12")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["steps"] == 12, "one step per optimizer step"
    assert document["measured_steps"] == 9 and document["exit_code"] == 0
    assert document["syncs_per_step"] == 1.0, "the script's loss.item() in each step"
    assert "sync_points" in [f["rule"] for f in document["findings"]]
    assert "step 11 loss" in result.stderr, "the script's own prints go to stderr with --json"
    assert document["settings"]["batch_size"] == 32 and document["settings"]["model_dtype"] == "float32"


def test_a_crash_keeps_the_measurements_up_to_it_and_the_exit_code(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    saved = tmp_path / "profile.json"
    result = cli("profile", "--save", str(saved), str(SCRIPT), "--crash-at", "7")
    assert result.code == 1
    assert "RuntimeError: out of patience at step 7" in result.stderr
    assert "attach.py" not in result.stderr, "the user's traceback, without gpufly's frames"
    assert "the loop stopped with RuntimeError" in result.stdout
    data = json.loads(saved.read_text())
    assert len(data["steps"]) == 8 and data["crash"] == "RuntimeError: out of patience at step 7"
    report = cli("report", "--profile", str(saved))
    assert report.code == 0 and "profile: " in report.stdout
    assert "5 steps" in report.stdout or "5 measured" in report.stdout, "the 3 warm-up steps are not measured ones"


def test_file_function_entry_points_and_html(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = tmp_path / "profile.html"
    result = cli("profile", "--html", str(page), f"{SCRIPT}:entry", "--steps", "1")
    assert result.code == 0, result.stderr
    text = page.read_text()
    assert 'data-steps="' in text and "<rect" in text and "Where a step goes" in text
    assert "https://" not in text, "a standalone page"


@pytest.mark.parametrize(("target", "message"), [
    ("nope.py", "no such script: nope.py"),
    ("no_such_module_xyz:main", "module not found: no_such_module_xyz"),
    (":main", "not a function reference: ':main'"),
    (".x:main", "'.x' is not an absolute module name"),
    ("a..b:main", "'a..b' is not an absolute module name"),
    (f"{SCRIPT}:nothing_here", f"{SCRIPT} has no function 'nothing_here'"),
], ids=["missing script", "missing module", "no module name", "relative module", "empty module part",
        "missing function"])
def test_bad_targets_are_one_line(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str,  # type: ignore[no-untyped-def]
                                  message: str) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("profile", target)
    assert result.code == 2 and f"error: {message}" in result.stderr, result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.stderr


def test_a_syntax_error_in_an_entry_points_file_is_one_line_naming_the_place(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken.py"
    broken.write_text("def main():\n    return (\n")
    result = cli("profile", f"{broken}:main")
    assert result.code == 2 and "has a syntax error: " in result.stderr and f"{broken}, line " in result.stderr
    assert "Traceback" not in result.stderr and "py_compile" in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "is not valid JSON"),
    ('{"schema_version": 1, "steps": "x"}', 'steps must be a list, got "x"'),
    ('{"steps": []}', "is a profile of schema_version None; this gpufly reads 1"),
    ('{"schema_version": 2, "kind": "gpufly.bench", "results": []}', "is not a gpufly profile: it is a gpufly.bench "
                                                                     "file"),
])
def test_a_bad_profile_file_is_one_line_in_the_report(cli, tmp_path: Path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "profile.json"
    path.write_text(text)
    result = cli("report", "--profile", str(path))
    assert result.code == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    ('{"schema_version": 1, "steps": "x"}', 'steps must be a list, got "x"'),
    ('{"schema_version": 1, "steps": ["x"]}', r'steps\[0\] must be an object, got "x"'),
    ('{"schema_version": 1, "steps": [], "settings": {"device": "cpu"}, "gpu": [3]}', r"gpu\[0\] must be an object"),
    ('{"schema_version": 1, "steps": [{"index": 0, "wall_s": "1"}]}', r"steps\[0\]\.wall_s must be a number"),
    ('{"schema_version": 1, "steps": [{"index": 0, "wall_s": null}]}', r"steps\[0\]\.wall_s must be a number"),
    ('{"schema_version": 1, "steps": [{"index": 0, "wall_s": NaN}]}', r"steps\[0\]\.wall_s .* got NaN"),
    ('{"schema_version": 1, "steps": [{"index": 0, "wall_s": 1e400}]}', r"steps\[0\]\.wall_s .* got Infinity"),
    ('{"schema_version": 1, "steps": [{"index": 0, "wall_s": 0.1, "data_wait_s": -1}]}',
     r"steps\[0\]\.data_wait_s .* zero or more, got -1"),
    ('{"schema_version": 1, "steps": [{"index": 0, "wall_s": 0.1, "syncs": -2}]}',
     r"steps\[0\]\.syncs .* zero or more, got -2"),
])
def test_a_profile_file_of_the_wrong_shape_is_a_one_line_error_naming_the_field(tmp_path: Path, text: str,
                                                                                message: str) -> None:
    from gpufly.errors import GpuflyError
    from gpufly.profile.records import load_profile

    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(GpuflyError, match=message) as caught:
        load_profile(path)
    assert "\n" not in caught.value.message and caught.value.message.startswith(f"{path}: ")


def test_a_profile_from_a_newer_gpufly_still_loads(tmp_path: Path) -> None:
    from gpufly.profile.records import ProfileData, StepRecord, load_profile

    document = ProfileData(steps=[StepRecord(index=0, wall_s=0.01)]).to_dict()
    document["steps"][0]["energy_j"] = 3.5  # fields this version does not know
    document["power_trace"] = [1, 2]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(document))
    assert load_profile(path).steps == [StepRecord(index=0, wall_s=0.01)]


EXIT3 = """import sys, torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(TensorDataset(torch.randn(40, 8), torch.randint(0, 2, (40,))), batch_size=8):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
print("the script ran")
sys.exit(3)
"""


def test_an_unwritable_output_fails_before_the_run(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "exit3.py"
    script.write_text(EXIT3)
    saved = tmp_path / "ok.json"
    result = cli("profile", "--html", str(tmp_path / "no_such_dir" / "x.html"), "--save", str(saved), str(script))
    assert result.code == 2 and result.stderr.startswith("error: cannot write --html"), result.stderr
    assert "hint:" in result.stderr and "Traceback" not in result.stderr
    assert "the script ran" not in result.stdout, "checked before the script runs, not after"
    assert not saved.exists(), "the check leaves no file behind"
    folder = cli("profile", "--save", str(tmp_path), str(script))
    assert folder.code == 2 and "is a folder" in folder.stderr


def test_a_write_failure_after_the_run_is_one_line_and_keeps_the_exit_code(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills while the script runs: --save was writable when checked, and fails when written."""
    from gpufly.errors import GpuflyError
    from gpufly.profile import render

    def disk_full(path: Path, data: object, hint: str | None = None) -> None:
        raise GpuflyError(f"cannot write {path}: No space left on device", hint)

    monkeypatch.setattr(render, "write_json_atomic", disk_full)
    script = tmp_path / "exit3.py"
    script.write_text(EXIT3)
    page, saved = tmp_path / "ok.html", tmp_path / "run.json"
    result = cli("profile", "--save", str(saved), "--html", str(page), str(script))
    assert result.code == 3, result.stderr
    assert f"error: cannot write {saved}: No space left" in result.stderr and "Traceback" not in result.stderr
    assert page.is_file() and "<svg" in page.read_text(), "the other output is still written"


def _chart_page(tmp_path: Path, steps: list, **data: object) -> str:  # type: ignore[type-arg]
    from gpufly.profile.records import ProfileData
    from gpufly.profile.render import write_html

    page = tmp_path / "chart.html"
    write_html(page, ProfileData(steps=steps, **data), [])  # type: ignore[arg-type]
    return page.read_text()


def _bar_heights(text: str) -> list[float]:
    """Each bar's total height in the step chart (its stacked parts added up), in drawing order."""
    import re

    totals: dict[str, float] = {}
    for x, height in re.findall(r'<rect class="step[^"]*" data-part="[^"]*" x="([\d.]+)"[^>]*height="([\d.]+)"', text):
        totals[x] = totals.get(x, 0.0) + float(height)
    return list(totals.values())


def test_the_html_chart_is_scaled_to_the_measured_steps_not_a_long_warm_up(tmp_path: Path) -> None:
    from gpufly.profile.records import StepRecord
    from gpufly.profile.render import CHART_H, MARGIN_BOTTOM, MARGIN_TOP

    steps = [StepRecord(index=0, wall_s=2.0, warmup=True)]  # compilation: 200x a measured step
    steps += [StepRecord(index=i, wall_s=0.010 if i % 2 else 0.005, data_wait_s=0.002) for i in range(1, 11)]
    text = _chart_page(tmp_path, steps)
    room = CHART_H - MARGIN_TOP - MARGIN_BOTTOM
    heights = _bar_heights(text)
    assert max(heights[1:]) == pytest.approx(room), "the longest measured step reaches the top of the axis (10 ms)"
    assert min(heights[1:]) == pytest.approx(room / 2), "a step half as long is half as tall"
    assert heights[0] == pytest.approx(room) and text.count('class="clipped"') == 1, "the warm-up bar is clipped"
    assert 'data-scale-ms="10"' in text and "longer than the axis, clipped" in text


def test_the_html_chart_has_labelled_axes_the_parts_of_each_step_and_the_noise_floor(tmp_path: Path) -> None:
    from gpufly.profile.records import StepRecord

    steps = [StepRecord(index=i, wall_s=0.010, data_wait_s=0.002, forward_s=0.003, backward_s=0.003,
                        optimizer_s=0.001, sync_wait_s=0.0005, detailed=i < 6) for i in range(12)]
    text = _chart_page(tmp_path, steps)
    assert "step time (ms)" in text and "step number" in text
    assert '<text class="ytick"' in text and '<text class="xtick"' in text
    parts = {part for part in ("data wait", "forward", "backward", "optimizer", "sync stall", "other",
                               "not looked inside") if f'data-part="{part}"' in text}
    assert parts == {"data wait", "forward", "backward", "optimizer", "sync stall", "other", "not looked inside"}
    assert 'class="median"' in text and 'class="noise-band"' in text and "p10-p90" in text
    assert 'preserveAspectRatio="xMidYMid meet"' in text and "width: 100%" in text, "it scales with the page"


def test_a_long_run_is_drawn_as_bins_of_steps_said_on_the_axis(tmp_path: Path) -> None:
    from gpufly.profile.records import StepRecord
    from gpufly.profile.render import MAX_BARS

    text = _chart_page(tmp_path, [StepRecord(index=i, wall_s=0.001) for i in range(3 * MAX_BARS)])
    assert 'data-bin="3"' in text and "each bar the mean of 3 steps" in text
    assert len(_bar_heights(text)) == MAX_BARS


def test_every_result_carries_its_receipt_noise_floor_and_overhead(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = tmp_path / "p.html"
    result = cli("profile", "--json", "--html", str(page), str(SCRIPT), "--steps", "12")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    receipt = document["receipt"]
    assert receipt["device"] == "cpu" and receipt["cpu"] and receipt["cpu_threads"] >= 1
    assert receipt["torch"] and receipt["python"] and receipt["gpufly"] and receipt["batch_size"] == 32
    assert receipt["steps"] == 12 and receipt["measured_steps"] == 9
    noise = document["noise"]
    assert noise["p10_step_s"] <= noise["median_step_s"] <= noise["p90_step_s"]
    assert noise["median_low_s"] <= noise["median_step_s"] <= noise["median_high_s"]
    overhead = document["overhead"]
    assert overhead["per_step_s"] >= 0 and overhead["hook_calls"] > 0 and "timed inside" in overhead["how"]
    text = page.read_text()
    assert "measured on CPU" in text and "noise floor" in text and "own cost" in text
    assert "expected gain:" in text
    plain = cli("profile", str(SCRIPT), "--steps", "12")
    assert "measured on CPU" in plain.stdout and "noise floor:" in plain.stdout and "own cost:" in plain.stdout


def test_a_warm_up_longer_than_the_run_leaves_out_its_first_half_and_says_so(cli) -> None:  # type: ignore[no-untyped-def]
    """Every step inside --warmup: the first steps (compilation, allocation) would otherwise set every figure."""
    result = cli("profile", "--json", "--warmup", "100", str(SCRIPT), "--steps", "12")
    document = json.loads(result.stdout)
    assert document["short_of_warmup"] is True and document["measured_steps"] == 6
    text = cli("profile", "--warmup", "100", str(SCRIPT), "--steps", "12").stdout
    assert "fell inside the warm-up" in text and "second half" in text
    assert json.loads(cli("profile", "--json", str(SCRIPT), "--steps", "12").stdout)["short_of_warmup"] is False


def test_the_traced_steps_are_left_out_of_the_figures_and_the_trace_is_shown(cli) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(cli("profile", "--json", "--trace", "2", str(SCRIPT), "--steps", "12").stdout)
    assert document["measured_steps"] == 12 - 3 - 2, "3 warm-up steps and the 2 traced ones left out"
    assert document["trace"]["steps"] == 2
    text = cli("profile", "--trace", "2", str(SCRIPT), "--steps", "12").stdout
    assert "torch.profiler window: 2 steps" in text and "left out of the" in text


def test_a_wide_spread_of_step_times_is_marked_noisy_with_its_reason() -> None:
    from gpufly.profile.records import ProfileData, StepRecord
    from gpufly.profile.render import NOISY_SPREAD, noise_floor

    def data(times: list[float]) -> ProfileData:
        return ProfileData(steps=[StepRecord(index=i, wall_s=t) for i, t in enumerate(times)])

    steady = noise_floor(data([0.010, 0.0101, 0.0099, 0.010, 0.0102, 0.010, 0.0098, 0.010]))
    jumpy = noise_floor(data([0.010, 0.020, 0.005, 0.010, 0.030, 0.010, 0.004, 0.010]))
    assert steady is not None and jumpy is not None
    assert steady["noisy"] is False and steady["noisy_reason"] is None
    assert jumpy["spread"] > NOISY_SPREAD and jumpy["noisy"] is True and "of the median" in jumpy["noisy_reason"]


def test_a_script_with_a_syntax_error_is_one_error_before_anything_runs(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken.py"
    broken.write_text("print('ran')\ndef main(:\n    pass\n")
    result = cli("profile", str(broken))
    assert result.code == 2 and "Traceback" not in result.stderr and "ran" not in result.stdout
    assert "has a syntax error: " in result.stderr and "(line 2)" in result.stderr and "hint:" in result.stderr
