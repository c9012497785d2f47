"""Where the output goes wrong, not the command: a full disk, a closed pipe, a terminal that only takes ASCII.

Each is what only a real process shows (its own stdout descriptor, its encoding, the interpreter's last flush), so
these run `python -m gpufly` itself. A full disk is one `error:` line and exit 1; a closed pipe is silence and
exit 0, as for any Unix filter (`gpufly gpus | head -1`); an ASCII-only output gets stand-ins for gpufly's own
symbols and Rich's ASCII boxes. Never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI_COLUMNS, PROCESS_TIMEOUT_S

FULL = Path("/dev/full")
RECORDING = str(Path(__file__).parent.parent / "fixtures" / "monitor" / "two_gpus.jsonl")

PRINTING = [
    ["gpus"],
    ["gpus", "--json"],
    ["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--json"],
]
"""Commands that print without hardware, in the default run: a table, JSON, and the advisor."""
PRINTING_EVERYWHERE = [
    ["--help"],
    ["fit", "--help"],
    ["--version"],
    ["models"],
    ["gpus", "show", "rtx-4090"],
    ["fit", "llama-3.1-8b", "--gpu", "rtx-4090"],
    ["recommend", "llama-3.1-8b", "--top", "3"],
    ["doctor", "--json"],
    ["install", "torch"],
    ["top", "--once", "--replay", RECORDING],
    ["top", "--once", "--json", "--replay", RECORDING],
    ["watch", "--replay", RECORDING, "--count", "2", "--interval", "0.01"],
]
"""The rest of the commands that print, for the slow run."""


def _run(argv: list[str], *, stdout: int, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": CLI_COLUMNS, **(env or {})}
    return subprocess.run([sys.executable, "-m", "gpufly", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=environment, timeout=PROCESS_TIMEOUT_S, check=False)


def _into_a_full_disk(argv: list[str]) -> subprocess.CompletedProcess[str]:
    with FULL.open("w") as full:
        return _run(argv, stdout=full.fileno())


def _assert_one_error(done: subprocess.CompletedProcess[str]) -> None:
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert lines[-2:] == ["error: could not write the output: No space left on device",
                          "hint: free space where standard output goes, or send it elsewhere"], lines
    assert not any(line.startswith("error:") for line in lines[:-2]), lines


needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")


@needs_dev_full
@pytest.mark.parametrize("argv", PRINTING, ids=" ".join)
def test_output_to_a_full_disk_is_one_error_line(argv: list[str]) -> None:
    _assert_one_error(_into_a_full_disk(argv))


@pytest.mark.slow
@needs_dev_full
@pytest.mark.parametrize("argv", PRINTING_EVERYWHERE, ids=" ".join)
def test_every_command_says_a_full_disk_in_one_line(argv: list[str]) -> None:
    _assert_one_error(_into_a_full_disk(argv))


def test_a_closed_standard_output_is_one_error_line() -> None:
    """`gpufly gpus >&-`: the shell gave no standard output at all (Python's sys.stdout is None)."""
    done = subprocess.run([sys.executable, "-m", "gpufly", "gpus"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, "COLUMNS": CLI_COLUMNS}, timeout=PROCESS_TIMEOUT_S,
                          preexec_fn=lambda: os.close(1), check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and lines[0] == "error: could not write the output: standard output is closed", lines
    assert len(lines) == 2 and lines[1].startswith("hint: ")


def _into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The reader went away before the first byte (`| head -0`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return _run(argv, stdout=write_end)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", PRINTING[:2], ids=" ".join)
def test_a_closed_pipe_is_silence_and_success(argv: list[str]) -> None:
    done = _into_a_closed_pipe(argv)
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv", PRINTING_EVERYWHERE, ids=" ".join)
def test_every_command_is_silent_into_a_closed_pipe(argv: list[str]) -> None:
    done = _into_a_closed_pipe(argv)
    assert done.returncode == 0 and done.stderr == "", done.stderr


ASCII_ONLY = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "LC_ALL=C without UTF-8 mode": {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
                                    "PYTHONIOENCODING": ""},
}


@pytest.mark.parametrize("env", ASCII_ONLY.values(), ids=ASCII_ONLY)
def test_an_ascii_only_output_gets_stand_ins_not_a_traceback(env: dict[str, str]) -> None:
    done = _run(["gpus"], stdout=subprocess.PIPE, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.isascii()
    assert "- = not published nor derivable" in done.stdout  # the table's caption, its em dash stood in for
    assert "~ = not published; derived" in " ".join(done.stdout.split())


def test_json_in_an_ascii_only_output_loses_nothing() -> None:
    """JSON escapes what the output cannot show (\\u2248), so the data read back is the data written."""
    ascii_only = _run(["gpus", "show", "4090", "--json"], stdout=subprocess.PIPE, env={"PYTHONIOENCODING": "ascii"})
    utf8 = _run(["gpus", "show", "4090", "--json"], stdout=subprocess.PIPE, env={"PYTHONIOENCODING": "utf-8"})
    assert ascii_only.returncode == 0 and ascii_only.stdout.isascii(), ascii_only.stderr
    assert json.loads(ascii_only.stdout) == json.loads(utf8.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("argv", [*PRINTING, *PRINTING_EVERYWHERE], ids=" ".join)
def test_every_command_prints_in_an_ascii_only_output(argv: list[str]) -> None:
    done = _run(argv, stdout=subprocess.PIPE, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.isascii() and done.stderr.isascii()


def test_an_error_with_a_symbol_reaches_an_ascii_only_stderr() -> None:
    done = _run(["fit", "llama\u2014x"], stdout=subprocess.PIPE, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[0].startswith("error: unknown model 'llama-x'")


def test_a_bare_gpufly_lists_the_commands(cli) -> None:
    result = cli()
    assert result.code == 0 and result.stderr == ""
    assert "Commands" in result.stdout and "fit" in result.stdout
