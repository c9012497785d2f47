"""The root command: every command listed from COMMANDS, built only when it runs."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from gpufly.cli.main import COMMANDS, build_command


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_line_is_the_commands_own_first_paragraph(name: str) -> None:
    command = build_command(name)
    first = inspect.cleandoc(command.help or "").split("\n\n")[0].replace("\n", " ")
    assert COMMANDS[name].summary == first


def test_help_lists_every_command_with_its_whole_line(cli) -> None:
    result = cli("--help")
    assert result.code == 0
    lines = result.stdout.splitlines()
    words = " ".join(" ".join(lines).split())
    for name, entry in COMMANDS.items():
        assert any(line.startswith(f"  {name} ") for line in lines), name
        assert f"{name} {entry.summary}" in words


def test_help_and_one_command_load_no_other_command_module() -> None:
    script = ("import sys\nfrom gpufly.cli.main import main\n"
              "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
              "print(sorted(m for m in sys.modules if m.startswith('gpufly.cli.') and m not in "
              "('gpufly.cli.main', 'gpufly.cli.render')))")
    root = subprocess.run([sys.executable, "-c", script, "--help"], capture_output=True, text=True, check=True)
    assert root.stdout.strip().splitlines()[-1] == "[]"
    models = subprocess.run([sys.executable, "-c", script, "models", "--json"], capture_output=True, text=True,
                            check=True)
    assert models.stdout.strip().splitlines()[-1] == "['gpufly.cli.advise']"


def test_a_mistyped_command_gets_the_closest_names(cli) -> None:
    result = cli("recomend")
    assert result.code == 2
    assert "Did you mean 'recommend'?" in result.stderr
