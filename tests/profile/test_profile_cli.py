"""`gpufly profile`: a script unchanged, module:function, a crash that keeps its measurements, JSON, HTML, report."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert report.code == 0 and "profile: " in report.stdout and "8 steps" not in report.stdout
    assert "5 steps" in report.stdout


def test_file_function_entry_points_and_html(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page = tmp_path / "profile.html"
    result = cli("profile", "--html", str(page), f"{SCRIPT}:entry", "--steps", "1")
    assert result.code == 0, result.stderr
    text = page.read_text()
    assert 'data-steps="' in text and "<rect" in text and "Where a step goes" in text
    assert "https://" not in text, "a standalone page"


def test_bad_targets_are_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = cli("profile", str(tmp_path / "nope.py"))
    assert missing.code == 2 and "no such script" in missing.stderr and "Traceback" not in missing.stderr
    no_module = cli("profile", "no_such_module_xyz:main")
    assert no_module.code == 2 and "cannot import no_such_module_xyz" in no_module.stderr
    no_function = cli("profile", f"{SCRIPT}:nothing_here")
    assert no_function.code == 2 and "has no function 'nothing_here'" in no_function.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    bad = cli("report", "--profile", str(broken))
    assert bad.code == 2 and "is not valid JSON" in bad.stderr
