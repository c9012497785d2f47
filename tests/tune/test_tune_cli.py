"""`gpufly tune` from the shell: a user's workload, the results file, --resume, and clear loading errors."""

from __future__ import annotations

import json
from pathlib import Path

TINY = Path(__file__).parent.parent / "fixtures" / "tune" / "tiny.py"


def test_a_user_workload_is_tuned_and_resumed(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "trials.jsonl"
    page = tmp_path / "tune.html"
    first = cli("tune", f"{TINY}:workload", "--steps", "12", "--results", str(results), "--html", str(page), "--json")
    assert first.code == 0, first.stderr
    document = json.loads(first.stdout)
    names = [t["configuration"] for t in document["trials"]]
    assert names[:4] == ["baseline", "num_workers=2", "batch_size=128", "amp=bf16"]
    assert {"optimizer_impl=foreach", "optimizer_impl=fused"} <= set(names)
    bars = page.read_text().count('class="trial"')
    assert bars == sum(t["speedup"] is not None for t in document["trials"]) and bars >= 4
    assert all(t["status"] in ("ok", "unsafe") for t in document["trials"])
    assert document["trials"][0]["speedup"] == 1.0 and document["best"] is not None
    assert len(results.read_text().splitlines()) == len(names)
    again = cli("tune", f"{TINY}:workload", "--steps", "12", "--results", str(results))
    assert again.code == 2 and "already holds trial results" in again.stderr and "--resume" in again.stderr
    resumed = cli("tune", f"{TINY}:workload", "--steps", "12", "--results", str(results), "--resume", "--json")
    assert resumed.code == 0
    assert len(results.read_text().splitlines()) == len(names), "every trial came from the file"
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
