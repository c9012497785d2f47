"""Every numeric option of every command, given 0, a negative, NaN, infinity, a huge number, text, nothing and a
fraction: refused in one `error:` line with a `hint:` (exit 2), or answered where the value is one the option takes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile.conftest import answered_or_refused, refused
from tests.hostile.inputs import NUMBER_VALUES, NUMBERS, Number


def _cases() -> list[object]:
    cases: list[object] = []
    for option in NUMBERS:
        for name, value in NUMBER_VALUES.items():
            if name in option.accepts and not option.cheap:
                continue  # a valid value for a command that then runs until stopped: its own tests cover it
            cases.append(pytest.param(option, name, value, id=f"{option.name}-{name}"))
    return cases


@pytest.mark.parametrize(("option", "name", "value"), _cases())
def test_numeric_options_refuse_what_they_cannot_take(run, tmp_path: Path, option: Number, name: str,
                                                      value: str) -> None:
    output = tmp_path / "out.jsonl"
    argv = [value if part == "{value}" else str(output) if part == "{out}" else part for part in option.argv]
    result = run(*argv)
    if name in option.accepts:
        answered_or_refused(result)
        assert result.code != 2, f"{option.name} {value!r} is valid, yet refused: {result.stderr}"
    else:
        refused(result)
