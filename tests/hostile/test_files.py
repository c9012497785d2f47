"""Every file reader of every command, given hostile files: each is one `error:` line and one `hint:` line, exit 2.

The readers and the hostile inputs are tables in `inputs.py`; this module crosses them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.conftest import answered_or_refused, refused, skip_as_root
from tests.hostile.inputs import (
    CONTENTS,
    HOSTILE_VALUES,
    KNOWN_FAILURES,
    MAY_BE_VALID,
    READERS,
    SCRIPT_READERS,
    SPECIALS,
    Contents,
    FifoWatchdog,
    Reader,
    Special,
    known_failures_marked,
    with_value,
)

LOG_CAP_FOR_TESTS = 2**20
"""The line-per-record readers (recordings, tuner results) take files up to 1 GiB; a case lowers that cap, so a
file over it costs a sparse 64 MiB file like the document readers' case, not a gigabyte read."""


@pytest.mark.parametrize(("reader", "contents"), known_failures_marked(READERS, CONTENTS))
def test_hostile_contents_are_one_error(run, tmp_path: Path, reader: Reader, contents: Contents) -> None:
    valid = reader.valid_text() if reader.valid is not None else ""
    path = tmp_path / f"input{reader.suffix}"
    path.write_bytes(contents.make(valid))
    if contents.name in reader.accepts:
        if not reader.cheap:
            pytest.skip(f"{contents.name} is valid for {reader.name}, which then runs until stopped")
        answered_or_refused(run(*reader.command(path)))
        return
    refused(run(*reader.command(path)))


@pytest.mark.parametrize(("reader", "special"), known_failures_marked(READERS + SCRIPT_READERS, SPECIALS))
def test_special_files_are_refused_not_read(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: Reader,
                                            special: Special) -> None:
    if special.needs_non_root:
        skip_as_root()
    if special.name in reader.accepts and not reader.cheap:
        pytest.skip(f"{special.name} is valid for {reader.name}, which then runs until stopped")
    known = (reader.name, special.name) in KNOWN_FAILURES
    monkeypatch.setattr("gpufly.jsonfile.LOG_LIMIT_BYTES", LOG_CAP_FOR_TESTS)
    path = special.make(tmp_path)
    if reader.suffix != ".json" and path.parent == tmp_path and path.exists() and not path.is_dir():
        path = path.rename(path.with_suffix(reader.suffix))
    with FifoWatchdog(path, after_s=2.0 if known else 20.0) as watchdog:
        result = run(*reader.command(path))
    assert not watchdog.fired, f"{reader.name} waited on a FIFO for a writer instead of refusing it"
    if special.name in reader.accepts:
        answered_or_refused(result)
    else:
        refused(result)
    assert path.exists() or special.name == "a missing file", "a reader never removes its input"


def _field_cases() -> list[object]:
    """Every reader's fields crossed with every hostile value. The default run takes half of the product (each
    field every other value, alternating, so every value still meets every reader); `-m slow` the other half."""
    cases: list[object] = []
    for reader in READERS:
        for number, field in enumerate(reader.fields):
            for index, (name, value) in enumerate(HOSTILE_VALUES.items()):
                if not reader.cheap and name in MAY_BE_VALID:
                    continue  # may be valid there, and a valid input runs until stopped
                marks = [pytest.mark.slow] if (number + index) % 2 or reader.slow else []
                cases.append(pytest.param(reader, field, value, id=f"{reader.name}-{field}-{name}", marks=marks))
    return cases


@pytest.mark.parametrize(("reader", "field", "value"), _field_cases())
def test_wrong_values_in_each_field_are_answered_or_one_error(run, tmp_path: Path, reader: Reader, field: str,
                                                              value: object) -> None:
    """Each field given a value of the wrong type (or NaN, a negative, an absurd number): either the value is one
    the field takes and the command answers, or it is refused naming the field; never a traceback."""
    import json

    assert reader.valid is not None
    document = with_value(reader.valid(), field, value)
    path = tmp_path / f"input{reader.suffix}"
    text = "".join(json.dumps(line) + "\n" for line in document) if reader.lines else json.dumps(document)
    path.write_text(text)
    result = run(*reader.command(path))
    if reader.cheap:
        answered_or_refused(result)
    else:
        refused(result)
