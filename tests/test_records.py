"""One loader for every saved file: strict types, value checks and errors that name the field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from gpufly.errors import GpuflyError
from gpufly.records import checked, from_dict


def _version(value: str) -> None:
    if not value.replace(".", "").isdigit():
        raise GpuflyError(f"cannot read version {value!r}", hint="expected dotted numbers, e.g. 12.4")


@dataclass(frozen=True)
class Process:
    pid: Annotated[int, msgspec.Meta(ge=0)]
    name: str | None = None


@dataclass(frozen=True)
class Env:
    cuda_visible_devices: str | None = None
    cuda: str | None = field(default=None, metadata=checked(_version))
    arches: tuple[str, ...] = field(default=(), metadata=checked(_version))


@dataclass(frozen=True)
class Machine:
    env: Env
    processes: tuple[Process, ...] = ()
    ratio: float | None = None


def test_a_good_document_becomes_the_dataclass_tree() -> None:
    machine = from_dict(Machine, {"env": {"cuda": "12.4", "arches": ["8.0"]}, "processes": [{"pid": 7}],
                                  "ratio": 1}, "m.json")
    assert machine == Machine(Env(cuda="12.4", arches=("8.0",)), (Process(7),), 1.0)


@pytest.mark.parametrize(("data", "message"), [
    ({"env": {"cuda_visible_devices": 0}}, "m.json: env.cuda_visible_devices must be a string, got 0"),
    ({"env": None}, "m.json: env must be an object, got null"),
    ({}, "m.json: env is missing (a required field)"),
    ({"env": {}, "processes": [{"pid": -1}]}, "m.json: processes[0].pid must not be negative, got -1"),
    ({"env": {}, "processes": [{"pid": True}]}, "m.json: processes[0].pid must be a whole number, got true"),
    ({"env": {}, "processes": {"pid": 1}}, "m.json: processes must be a list, got"),
    ({"env": {"cuda": "twelve"}}, "m.json: env.cuda is not valid: cannot read version 'twelve'"),
    ({"env": {"arches": ["8.0", "x"]}}, "m.json: env.arches[1] is not valid: cannot read version 'x'"),
    ({"env": {"gpu": 1}}, "m.json: env has unknown field(s) gpu"),
    ({"env": {}, "processes": [{"pid": 1, "user": "x"}]}, "m.json: processes[0] has unknown field(s) user"),
    (["not", "an", "object"], "m.json must be an object, got"),
])
def test_every_problem_is_one_error_naming_the_field(data: object, message: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        from_dict(Machine, data, "m.json", hint="write it again")
    assert caught.value.message.startswith(message)
    assert caught.value.hint


def test_unknown_fields_can_be_ignored_for_files_newer_versions_extend() -> None:
    assert from_dict(Machine, {"env": {"new": 1}, "later": 2}, "m.json", unknown="ignore") == Machine(Env())


def test_a_value_checks_hint_wins_over_the_general_one() -> None:
    with pytest.raises(GpuflyError) as caught:
        from_dict(Machine, {"env": {"cuda": "x"}}, "m.json", hint="general")
    assert caught.value.hint == "expected dotted numbers, e.g. 12.4"


def test_a_measured_figure_must_be_finite(tmp_path: Path) -> None:
    from gpufly.bench.results import load_run

    run = json.loads((Path(__file__).parent / "fixtures" / "bench" / "cpu_quick_1thread.json").read_text())
    run["results"][0]["value"] = float("inf")
    path = tmp_path / "inf.json"
    path.write_text(json.dumps(run))
    with pytest.raises(GpuflyError, match=r"results\[0\]\.value is not valid: inf is not a finite number"):
        load_run(path)
