"""The saved file: a versioned schema that round-trips and refuses what it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.bench.results import SCHEMA_VERSION, BenchRun, load_run
from gpufly.errors import GpuflyError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "bench"
RECORDED = sorted(FIXTURES.glob("cpu_*.json"))
"""Runs saved by schema version 1 (before intervals): they must still read."""


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_recorded_runs_load_and_round_trip(path: Path) -> None:
    run = load_run(path)
    assert run.schema_version == 1 and run.device.kind == "cpu"
    assert all(r.value_low is None and not r.noisy and r.timing.ci_level is None for r in run.results)
    assert run.finished_at is not None
    assert BenchRun.from_dict(json.loads(json.dumps(run.to_dict()))).to_dict() == run.to_dict()


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_every_number_carries_its_unit_sizes_and_repeats(path: Path) -> None:
    data = json.loads(path.read_text())
    assert data["schema_version"] in (1, SCHEMA_VERSION) and data["kind"] == "gpufly.bench"
    for key in ("name", "torch_version", "cpu_model", "cpu_threads", "python_version"):
        assert data["device"][key], key
    for result in data["results"]:
        assert result["unit"] in ("FLOP/s", "OP/s", "B/s", "s")
        assert result["value"] > 0 and result["params"]["shape"]
        timing = result["timing"]
        assert timing["repeats"] == len(timing["samples_s"]) >= 3
        assert timing["min_s"] <= timing["p10_s"] <= timing["median_s"] <= timing["p90_s"] <= timing["max_s"]
        assert result["peak"] is None and result["percent_of_peak"] is None


def test_the_two_recorded_runs_differ_in_threads() -> None:
    threads = {load_run(path).device.cpu_threads for path in RECORDED}
    assert threads == {1, 2}


def _recorded() -> dict:
    return json.loads(RECORDED[0].read_text())


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "upgrade gpufly"),
    (lambda d: d.pop("schema_version"), "no schema_version"),
    (lambda d: d.update(schema_version="1"), "no schema_version"),
    (lambda d: d.update(schema_version=0), "invalid schema_version"),
    (lambda d: d.update(kind="gpufly.tune"), "not a gpufly bench result"),
    (lambda d: d.pop("results"), "results is missing (a required field)"),
    (lambda d: d.pop("device"), "device is missing (a required field)"),
    (lambda d: d.pop("started_at"), "started_at is missing (a required field)"),
    (lambda d: d["device"].update(colour="red"), "device has unknown field(s) colour"),
    (lambda d: d["results"][0].pop("timing"), "results[0].timing is missing (a required field)"),
    (lambda d: d["results"][0].update(value="fast"), 'results[0].value must be a number, got "fast"'),
    (lambda d: d["results"][0].update(value=True), "results[0].value must be a number, got true"),
    (lambda d: d["results"][0].update(params=[1]), "results[0].params must be an object, got [1]"),
    (lambda d: d["results"][0]["timing"].update(median_s=None),
     "results[0].timing.median_s must be a number, got null"),
    (lambda d: d["results"][0]["timing"].update(extra=1), "results[0].timing has unknown field(s) extra"),
    (lambda d: d["errors"].append({"name": "gemm.fp8"}), "errors[0].group is missing (a required field)"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_malformed_or_future_files_are_refused(tmp_path: Path, change, message) -> None:
    data = _recorded()
    change(data)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GpuflyError) as caught:
        load_run(path)
    assert message in caught.value.message + " " + (caught.value.hint or "")
    assert caught.value.hint


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "null", '"run"'])
def test_files_that_are_not_runs_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(GpuflyError):
        load_run(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="cannot read"):
        load_run(tmp_path / "nowhere.json")


def test_save_writes_a_whole_readable_file(tmp_path: Path) -> None:
    run = load_run(RECORDED[0])
    target = tmp_path / "deeper" / "run.json"
    run.save(target)
    assert load_run(target).to_dict() == run.to_dict()
    assert [p.name for p in target.parent.iterdir()] == ["run.json"]
    assert target.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("target", [Path("/dev/full"), Path("folder")], ids=["a device node", "a folder"])
def test_save_refuses_what_is_not_a_regular_file(tmp_path: Path, target: Path) -> None:
    """A device node is refused, not replaced by a file (nor written into, where writes vanish)."""
    if not target.is_absolute():
        target = tmp_path / target
        target.mkdir()
    elif not target.exists():
        pytest.skip(f"{target} is not on this system")
    with pytest.raises(GpuflyError) as caught:
        load_run(RECORDED[0]).save(target)
    assert caught.value.message.startswith(f"cannot write {target}: it is ")
    assert caught.value.hint == "save to a file in a folder you can write, e.g. --save bench.json"
    assert not target.is_file()
