"""Recorded machines in, findings out: one scenario per failure the doctor knows, plus healthy ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.doctor.checks import diagnose, smoke_findings
from gpufly.doctor.facts import DriverFact, Facts, facts_from_dict, load_facts
from gpufly.doctor.smoke import SmokeResult
from gpufly.errors import GpuflyError

SCENARIOS = sorted((Path(__file__).parent.parent / "fixtures" / "doctor" / "scenarios").glob("*.json"))


def _scenario(path: Path) -> tuple[Facts, dict]:
    data = json.loads(path.read_text())
    return facts_from_dict(data["facts"], where=path.name), data["expect"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_findings(path: Path) -> None:
    facts, expect = _scenario(path)
    findings = diagnose(facts)
    assert sorted({f.check for f in findings if f.status == "fail"}) == expect["fail"]
    assert sorted({f.check for f in findings if f.status == "warn"}) == expect["warn"]
    statuses = [f.status for f in findings]
    assert statuses == sorted(statuses, key=["fail", "warn", "ok"].index), "fails first"
    for finding in findings:
        if finding.status == "fail":
            assert finding.fix, f"{finding.check} says what is wrong but not how to fix it"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_install_command(path: Path) -> None:
    from gpufly.doctor.install import choose_torch

    facts, expect = _scenario(path)
    plan = choose_torch(list(facts.gpus), facts.driver, facts.env.platform, facts.env.python_version)
    assert plan.command == expect["install_torch"]
    assert (plan.needs_driver if plan.advice else None) == expect["update_driver_to"]
    assert "cu113" not in plan.command and "tensorflow-gpu" not in plan.command


def test_at_least_twelve_scenarios() -> None:
    assert len(SCENARIOS) >= 12


def test_facts_round_trip(tmp_path) -> None:
    facts, _ = _scenario(SCENARIOS[0])
    path = tmp_path / "facts.json"
    facts.save(path)
    assert load_facts(path) == facts


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "is not a facts document"),
    ('{"schema_version": 99, "driver": {"found": false}}', "schema_version 99"),
    ('{"schema_version": 1, "driver": {"found": false}, "gpus": {"a": 1}}', "gpus should be a list"),
    ('{"schema_version": 1, "driver": {"found": false, "colour": "green"}}', "unknown field"),
    ('{"schema_version": 1}', "missing a field"),
])
def test_malformed_fact_files_are_clear_errors(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "facts.json"
    path.write_text(text)
    with pytest.raises(GpuflyError, match=message):
        load_facts(path)


def test_smoke_findings() -> None:
    facts = Facts(DriverFact(True, "570.1", "12.8"))
    good = SmokeResult(0, "NVIDIA H100 80GB HBM3", "bfloat16", 3e-3, True, 700.0)
    bad = SmokeResult(1, "NVIDIA H100 80GB HBM3", "float32", 0.4, False, 50.0)
    findings = smoke_findings([good, bad], None, facts)
    assert findings[0].status == "ok" and "71% of the 989.4 TFLOPS datasheet peak" in findings[0].what
    assert findings[1].status == "fail" and "wrong float32 matmul" in findings[1].what
    assert smoke_findings([], "the GPU smoke test did not finish within 120 s", facts)[0].status == "fail"


def test_doctor_replays_saved_facts(cli, tmp_path) -> None:
    path = SCENARIOS[0].parent / "old_gpu_dropped.json"
    facts_path = tmp_path / "facts.json"
    facts_path.write_text(json.dumps(json.loads(path.read_text())["facts"]))
    result = cli("doctor", "--facts", str(facts_path), "--json")
    assert result.code == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["findings"][0]["check"] == "arch_missing"
    text = cli("doctor", "--facts", str(facts_path))
    assert "no kernel image" in text.stdout.replace("\n", " ") or "dropped" in text.stdout


def test_doctor_on_a_broken_fact_file_is_one_error_line(cli, tmp_path) -> None:
    path = tmp_path / "facts.json"
    path.write_text("{oops")
    result = cli("doctor", "--facts", str(path))
    assert result.code == 2 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {path} is not valid JSON (line 1: Expecting property name enclosed in double quotes)"]
