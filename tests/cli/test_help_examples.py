"""Every `--help` page shows 2-4 examples a person can paste, and each one parses."""

from __future__ import annotations

import shlex

import pytest
from typer.core import TyperGroup

from gpufly.cli.main import COMMANDS, build_command

EXAMPLES_PENDING: frozenset[str] = frozenset()
"""Commands whose help does not show examples yet: each fails its test here until it does (strict xfail), and
then must leave this set."""


def _examples(help_text: str) -> list[str]:
    """The lines of the "Examples:" paragraph, as typed."""
    lines = help_text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Examples:"), None)
    if start is None:
        return []
    examples = []
    for line in lines[start + 1:]:
        if not line.strip().startswith("gpufly "):
            break
        examples.append(line.strip())
    return examples


def _pages() -> list[tuple[str, ...]]:
    """Every help page: each command, and each subcommand of a command group."""
    pages: list[tuple[str, ...]] = []
    for name in COMMANDS:
        pages.append((name,))
        command = build_command(name)
        if isinstance(command, TyperGroup):
            pages.extend((name, sub) for sub in command.commands)
    return pages


@pytest.mark.parametrize("page", [
    pytest.param(page, marks=pytest.mark.xfail(strict=True, reason="examples not written yet"))
    if page[0] in EXAMPLES_PENDING else page
    for page in _pages()
], ids=" ".join)
def test_help_shows_examples_that_parse(cli, page: tuple[str, ...]) -> None:
    shown = cli(*page, "--help", env={"COLUMNS": "120"})
    assert shown.code == 0, shown.stderr
    examples = _examples(shown.stdout)
    assert 2 <= len(examples) <= 4, f"gpufly {' '.join(page)} --help shows {len(examples)} examples"
    command = build_command(page[0])
    for example in examples:
        words = shlex.split(example)
        assert words[:1 + len(page)] == ["gpufly", *page], example
        command.make_context(page[0], words[2:])  # raises on an option or value the command does not take
