"""Options as a person (or a script with an unset variable) gives them: an empty value is refused, never taken as
"not given"; an option the job does not use is said in a `note:`; options that contradict each other are refused.

The empty-value table is read from the commands themselves, so a new string or path option is covered the day it
is added; the rows below it only make sure the reading finds the ones issue 22 named.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.core import TyperArgument, TyperGroup

from gpufly.cli.main import COMMANDS, build_command

FIXTURES = Path(__file__).parent.parent / "fixtures"
BENCH_ONE = str(FIXTURES / "bench" / "cpu_quick_1thread.json")
BENCH_TWO = str(FIXTURES / "bench" / "cpu_quick_2threads.json")
RECORDING = str(FIXTURES / "monitor" / "two_gpus.jsonl")
PLACEHOLDER = "x"
"""The value given to every other required argument: parsing stops at the empty value before it is looked at."""


def _takes_text(param) -> bool:  # type: ignore[no-untyped-def]
    """A parameter a person types a word or a path into (not a flag, a number, or a script's own arguments)."""
    if param.nargs == -1 or getattr(param, "is_flag", False):
        return False
    kinds = getattr(param.type, "types", [param.type])
    return any(kind.name in ("str", "text", "path", "file", "directory") for kind in kinds)


def _commands() -> Iterator[tuple[list[str], object]]:
    for name in COMMANDS:
        command = build_command(name)
        yield [name], command
        if isinstance(command, TyperGroup):
            for sub_name, sub in command.commands.items():
                yield [name, sub_name], sub


def _empty_value_cases() -> Iterator[tuple[str, list[str], str]]:
    """(label, argv, the name the error gives) for every text parameter of every command, given ``''``."""
    for path, command in _commands():
        params = command.params  # type: ignore[attr-defined]
        arguments = [p for p in params if isinstance(p, TyperArgument) and p.nargs == 1]
        for param in params:
            if not _takes_text(param):
                continue
            if isinstance(param, TyperArgument):
                values = ["" if other is param else PLACEHOLDER for other in arguments]
                yield (f"{' '.join(path)} {param.name.upper()}", [*path, *values], param.name.upper())
                continue
            given = ["", PLACEHOLDER][:param.nargs] if param.nargs > 1 else [""]
            positionals = [PLACEHOLDER for p in arguments if p.required]
            yield (f"{' '.join(path)} {param.opts[0]}", [*path, param.opts[0], *given, *positionals],
                   param.opts[0])


EMPTY_CASES = list(_empty_value_cases())


@pytest.mark.parametrize(("argv", "name"), [case[1:] for case in EMPTY_CASES], ids=[c[0] for c in EMPTY_CASES])
def test_an_empty_value_is_refused_in_one_error_and_one_hint(cli, argv: list[str], name: str) -> None:
    result = cli(*argv)
    lines = result.stderr.strip().splitlines()
    assert result.code == 2, result.stderr
    assert lines == [f"error: {name} is empty", lines[1]] and lines[1].startswith(f"hint: give {name} a value"), lines
    assert result.stdout == ""


@pytest.mark.parametrize("case", ["gpus --vendor", "gpus --sort", "gpus --arch", "fit --gpu", "fit --quant",
                                  "fit --engine", "fit --lora-targets", "fit --fsdp", "fit --task", "fit MODEL",
                                  "recommend --quant", "recommend --prefer", "bench --device", "bench --save",
                                  "bench --compare", "watch --output", "top --replay", "tune --results",
                                  "serve --host", "profile TARGET", "profile --save", "install --cuda"])
def test_the_table_reaches_the_options_the_issue_named(case: str) -> None:
    assert case in {label for label, *_ in EMPTY_CASES}


def test_whitespace_alone_is_empty_too(cli) -> None:
    result = cli("fit", "llama-3.1-8b", "--gpu", "  ")
    assert result.code == 2 and result.stderr.startswith("error: --gpu is empty"), result.stderr


def test_a_scripts_own_empty_arguments_are_its_own(cli, tmp_path: Path) -> None:
    """After `profile SCRIPT`, `''` is the script's argument to judge, not gpufly's."""
    script = tmp_path / "script.py"
    script.write_text("import sys\nassert sys.argv[1:] == ['', 'b'], sys.argv\n")
    result = cli("profile", str(script), "", "b")
    assert "is empty" not in result.stderr, result.stderr


FIT = ["fit", "llama-3.1-8b", "--gpu", "H100 SXM"]

NOTES = [
    ([*FIT, "--zero", "2"], "note: --zero 2 shards training state; inference does not use it (ignored)"),
    ([*FIT, "--fsdp", "full_shard"], "note: --fsdp full_shard shards training state; inference does not use it"),
    ([*FIT, "--checkpointing"], "note: --checkpointing saves training activations; inference does not use it"),
    ([*FIT, "--lora-rank", "8"], "note: --lora-rank applies to --task lora or qlora; inference does not use it"),
    ([*FIT, "--lora-targets", "q_proj"], "note: --lora-targets applies to --task lora or qlora; inference"),
    ([*FIT, "--fp32", "--quant", "int4"], "note: --fp32 sets fp32 weights only where --quant is not given"),
    ([*FIT, "--task", "full", "--lora-rank", "8"], "note: --lora-rank applies to --task lora or qlora; full "
                                                   "training does not use it"),
    ([*FIT, "--task", "full", "--lora-targets", "q_proj"], "note: --lora-targets applies to --task lora or qlora; "
                                                           "full training"),
    (["recommend", "llama-3.1-8b", "--lora-rank", "8", "--top", "1"], "note: --lora-rank applies to --task lora"),
    (["bench", "--compare", BENCH_ONE, BENCH_TWO, "--device", "cpu"], "note: --compare measures nothing; --device "
                                                                      "ignored"),
    (["bench", "--compare", BENCH_ONE, BENCH_TWO, "--quick", "--only", "gemm"], "note: --compare measures nothing; "
                                                                                "--quick, --only ignored"),
    (["watch", "--replay", RECORDING, "--count", "1", "--interval", "0.01", "--rotate", "1"],
     "note: --rotate applies to an --output file; without one it is ignored"),
    (["top", "--once", "--replay", RECORDING, "--interval", "2"], "note: --once takes one snapshot; --interval "
                                                                  "ignored"),
]


@pytest.mark.parametrize(("argv", "note"), NOTES, ids=[" ".join(argv[:1] + argv[4:]) for argv, _ in NOTES])
def test_an_option_the_run_does_not_use_is_noted_on_stderr(cli, argv: list[str], note: str) -> None:
    result = cli(*argv)
    assert result.code in (0, 1) and "error:" not in result.stderr, result.stderr
    assert any(line.startswith(note) for line in result.stderr.splitlines()), result.stderr
    assert note not in result.stdout


def test_a_used_option_brings_no_note(cli) -> None:
    result = cli(*FIT, "--task", "lora", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj")
    assert "note: --lora" not in result.stderr, result.stderr


def test_notes_stay_out_of_json(cli) -> None:
    import json

    result = cli(*FIT, "--zero", "2", "--json")
    assert json.loads(result.stdout)["job"]["task"] == "infer"
    assert "note: --zero 2" in result.stderr


CONTRADICTIONS = [
    ([*FIT, "--task", "full", "--fsdp", "full_shard", "--zero", "2"],
     "error: --fsdp full_shard is ZeRO-3 in memory, but --zero says 2"),
    ([*FIT, "--task", "full", "--fsdp", "shard_grad_op", "--zero", "3"],
     "error: --fsdp shard_grad_op is ZeRO-2 in memory, but --zero says 3"),
    (["bench", "--compare", BENCH_ONE, BENCH_TWO, "--save", "out.json"],
     "error: --compare measures nothing, so --save would write nothing"),
]


@pytest.mark.parametrize(("argv", "error"), CONTRADICTIONS, ids=[" ".join(a) for a, _ in CONTRADICTIONS])
def test_options_that_contradict_each_other_are_refused(cli, argv: list[str], error: str) -> None:
    result = cli(*argv)
    lines = result.stderr.strip().splitlines()
    assert result.code == 2 and lines[0] == error and lines[1].startswith("hint: "), result.stderr
    assert len(lines) == 2


def test_fsdp_and_the_zero_stage_it_equals_agree(cli) -> None:
    result = cli(*FIT, "--task", "full", "--fsdp", "full_shard", "--zero", "3", "--json")
    assert result.code in (0, 1) and "error:" not in result.stderr, result.stderr


def test_json_lines_with_an_output_file_are_noted_as_unused(cli, tmp_path: Path) -> None:
    output = tmp_path / "gpus.csv"
    result = cli("watch", "--replay", RECORDING, "--count", "1", "--interval", "0.01", "--output", str(output),
                 "--json")
    assert result.code == 0, result.stderr
    assert "note: --json shapes lines on the terminal; with --output the file's own format is written" in result.stderr
    assert not output.read_text().startswith("{"), "the file keeps its own format: CSV"
