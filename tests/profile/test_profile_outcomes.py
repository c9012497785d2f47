"""How a `gpufly profile` run ends: the files written before the report (a closed or full stdout keeps them), a run
of no step that keeps an earlier profile, a script's exception named in one closing `error:` line, `--json` kept whole
when the script writes to file descriptor 1 itself, the no-step hints, a missing function found before the script
runs, the torch.profiler window's cost kept out of gpufly's own, and a noise floor that needs enough steps."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CLI_COLUMNS, PROCESS_TIMEOUT_S, CliResult

LOOP = """import sys, torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=8)):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    if step == RAISE_AT:
        raise RuntimeError("out of data at step %d" % step)
{end}
"""


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def unwrapped(text: str) -> str:
    """Text as one line: Rich wraps the report at the terminal's width."""
    return " ".join(text.split())


def loop(tmp_path: Path, raise_at: int = -1, end: str = "sys.exit(3)") -> Path:
    return script(tmp_path, "loop.py", f"RAISE_AT = {raise_at}\n" + LOOP.format(end=end))


class BrokenStdout(io.StringIO):
    """Standard output whose every write fails as ``error`` does (a reader gone, a full disk)."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        """Nothing is ever pending."""


def run_with_stdout(stdout: io.StringIO, *args: str) -> CliResult:
    """The CLI in this process, as ``cli`` runs it, with ``stdout`` as its standard output."""
    from gpufly.cli.main import main

    err = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return CliResult(code, "", err.getvalue())


# -- 1. the files before the report ----------------------------------------------------------------------------


def test_a_reader_gone_from_stdout_still_gets_both_files_written_and_the_scripts_code(tmp_path: Path) -> None:
    """`gpufly profile --html x.html --save x.json train.py | head -1` wrote neither file: the report was printed
    first, and the closed pipe ended the run before the writes."""
    saved, page = tmp_path / "x.json", tmp_path / "x.html"
    result = run_with_stdout(BrokenStdout(BrokenPipeError(errno.EPIPE, "Broken pipe")),
                             "profile", "--save", str(saved), "--html", str(page), str(loop(tmp_path)))
    assert result.code == 3, result.stderr
    assert len(json.loads(saved.read_text())["steps"]) == 8 and "<svg" in page.read_text()
    assert "Traceback" not in result.stderr and "error:" not in result.stderr


def test_a_full_disk_under_stdout_is_one_line_and_keeps_both_files(tmp_path: Path) -> None:
    """`> /dev/full`: the script's own print fails as it would under python (its traceback shows its frames, none of
    gpufly's), the files are written, and the run ends in one `error:` line, exit 1."""
    saved, page = tmp_path / "x.json", tmp_path / "x.html"
    train = loop(tmp_path, end='print("done")')
    result = run_with_stdout(BrokenStdout(OSError(errno.ENOSPC, "No space left on device")),
                             "profile", "--save", str(saved), "--html", str(page), str(train))
    assert result.code == 1
    assert len(json.loads(saved.read_text())["steps"]) == 8 and "<svg" in page.read_text()
    assert f'File "{train}", line' in result.stderr and 'print("done")' in result.stderr
    gpufly_source = str(Path(__import__("gpufly").__file__).parent)
    assert gpufly_source not in result.stderr, "no frame of gpufly's in the script's traceback"
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        "error: could not write the output: No space left on device"]


@pytest.mark.slow
def test_a_real_process_into_a_closed_pipe_or_a_full_disk_keeps_its_files(tmp_path: Path) -> None:
    """The shell's own ways: `| head -1` and `> /dev/full` (Linux)."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    train = loop(tmp_path, end='print("done")')
    environment = {**os.environ, "COLUMNS": CLI_COLUMNS}
    for name, shell in (("pipe", "| head -1"), ("full", "> /dev/full")):
        saved, page = tmp_path / f"{name}.json", tmp_path / f"{name}.html"
        command = f"{sys.executable} -m gpufly profile --save {saved} --html {page} {train} {shell}; " \
                  "echo \"rc=${PIPESTATUS[0]}\" >&2"
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=environment,
                              timeout=PROCESS_TIMEOUT_S)
        assert saved.is_file() and page.is_file(), (name, done.stderr)
        assert "gpufly/cli" not in done.stderr and "gpufly/profile" not in done.stderr, done.stderr
        assert ("rc=1" if name == "full" else "rc=0") in done.stderr, done.stderr


# -- 2. a run of no step keeps an earlier profile --------------------------------------------------------------


def test_a_run_that_measured_no_step_keeps_the_earlier_files_and_says_so(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    saved, page = tmp_path / "keep.json", tmp_path / "keep.html"
    good = cli("profile", "--save", str(saved), "--html", str(page), str(loop(tmp_path)))
    assert good.code == 3, good.stderr
    before = saved.read_bytes(), page.read_bytes()
    raises = script(tmp_path, "raises.py", 'import torch\nraise ValueError("boom from script")\n')
    result = cli("profile", "--save", str(saved), "--html", str(page), str(raises))
    assert result.code == 1
    assert (saved.read_bytes(), page.read_bytes()) == before, "a good profile is not replaced by one of no step"
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: kept")]
    assert notes == [f"note: kept {saved} and {page} from an earlier run: this run measured no step, and its profile "
                     "would have replaced them"]


def test_a_fresh_profile_of_no_step_says_why(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    saved = tmp_path / "fresh.json"
    raises = script(tmp_path, "raises.py", 'import torch\nraise ValueError("boom from script")\n')
    result = cli("profile", "--save", str(saved), str(raises))
    assert result.code == 1 and "note: kept" not in result.stderr
    data = json.loads(saved.read_text())
    assert data["steps"] == [] and data["crash"] == "ValueError: boom from script"
    assert data["no_step_reason"] == f"{raises} raised ValueError: boom from script before its first step ended"
    assert "no complete step was measured (" in result.stdout
    assert "before its first step ended" in unwrapped(result.stdout)


# -- 3. a script that raises ends in one `error:` line -------------------------------------------------------------


def test_a_script_that_raises_keeps_its_traceback_and_ends_with_one_error_naming_the_step(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    train = loop(tmp_path, raise_at=4)
    result = cli("profile", str(train))
    assert result.code == 1
    lines = result.stderr.splitlines()
    assert lines.index("Traceback (most recent call last):") < lines.index("RuntimeError: out of data at step 4")
    assert "attach.py" not in result.stderr and "runpy" not in result.stderr, "the script's frames only"
    assert [line for line in lines if line.startswith("error:")] == [
        f"error: {train} raised RuntimeError: out of data at step 4 in step 5 (steps count from 0): the 5 steps "
        "before it are measured above"]
    assert lines[-2].startswith("error:") and lines[-1].startswith("hint: the traceback above is the script's own")
    as_json = cli("profile", "--json", str(train))
    assert as_json.code == 1 and json.loads(as_json.stdout)["crash"] == "RuntimeError: out of data at step 4"
    assert as_json.stderr.splitlines()[-2].startswith("error:")
    first = cli("profile", str(script(tmp_path, "raises.py", 'raise KeyError("x")\n')))
    assert "raised KeyError: 'x' before its first step ended: nothing was measured" in first.stderr
    stopped = cli("profile", str(script(tmp_path, "exits.py", "import sys\nsys.exit(4)\n")))
    assert stopped.code == 4 and "error:" not in stopped.stderr, "an exit code is not an exception"


# -- 4. the torch.profiler window ----------------------------------------------------------------------------------


def test_the_trace_windows_cost_is_kept_out_of_gpuflys_own_and_said_with_the_trace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening torch.profiler and summarizing its trace happened inside the step clock's bookkeeping, and was charged
    to gpufly's own time: 815 µs a step, "100.43% of the median step". On a fake clock the summary here takes 0.5 s
    and nothing else takes any time."""
    import torch

    import gpufly
    from gpufly.profile import trace
    from gpufly.profile.render import receipt_lines, summary

    from .fakes import FakeClock

    clock = FakeClock()
    real_summarize = trace.summarize

    def slow_summarize(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock.advance(0.5)
        return real_summarize(*args, **kwargs)

    monkeypatch.setattr(trace, "summarize", slow_summarize)
    prof = gpufly.Profiler(warmup=2, trace_steps=2, clock=clock)
    model = torch.nn.Linear(8, 2)
    for x in prof.loader([torch.randn(4, 8) for _ in range(12)]):
        with prof.step():
            model(x).sum().backward()
            clock.advance(0.001)
    data = prof.finish()
    assert data.trace is not None and data.trace.first_step == 2 and data.trace.steps == 2
    assert data.trace.cost_s == pytest.approx(0.5)
    assert all(step.own_s == 0 for step in data.steps), "the 0.5 s is in no step's own time"
    assert data.overhead is not None and data.overhead.per_step_s == 0 and data.overhead.left_out_steps == 2
    assert data.trace.kernels > 0, "a CPU window counts the operator calls it recorded"
    text = "\n".join(receipt_lines(summary(data, [])))
    assert f"{data.trace.kernels} CPU operator calls" in text and "kernels or ops" not in text
    assert "took 500.0 ms, between steps, outside gpufly's own cost" in text
    assert "the 2 torch.profiler steps left out" in text


# -- 5. --json and file descriptor 1 ------------------------------------------------------------------------------

WRITES_TO_FD1 = """import os, subprocess, sys
print("to sys.__stdout__", file=sys.__stdout__, flush=True)
os.write(1, b"raw fd1 write\\n")
subprocess.run([sys.executable, "-c", "print('child echo')"], check=True)
print("unflushed", file=sys.__stdout__)
"""


def test_with_json_what_the_script_writes_to_fd_1_goes_to_stderr(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    result = cli("profile", "--json", str(script(tmp_path, "noisy.py", WRITES_TO_FD1)))
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["steps"] == 0
    descriptors = capfd.readouterr()
    for line in ("to sys.__stdout__", "raw fd1 write", "child echo", "unflushed"):
        assert line not in descriptors.out and line in descriptors.err, (line, descriptors)
    plain = cli("profile", str(script(tmp_path, "noisy.py", WRITES_TO_FD1)))
    assert "raw fd1 write" in capfd.readouterr().out, "without --json the script's stdout is stdout"
    assert plain.code == 0


# -- 6. no step: what to do --------------------------------------------------------------------------------------


def test_a_keras_script_is_told_to_use_the_keras_callback(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A plain Keras fit under `gpufly profile` measured nothing and said only that. No TensorFlow here: the script
    stands in a module named keras, which is what the check reads."""
    keras_script = script(tmp_path, "fit.py", 'import sys, types\nsys.modules["keras"] = types.ModuleType("keras")\n')
    before = sys.modules.get("keras")
    try:
        result = cli("profile", str(keras_script))
    finally:
        if before is None:
            sys.modules.pop("keras", None)
        else:
            sys.modules["keras"] = before
    assert result.code == 0
    assert "no complete step was measured" in result.stdout and "attaches to PyTorch loops" in unwrapped(result.stdout)
    hints = [line for line in result.stderr.splitlines() if line.startswith("hint:")]
    assert len(hints) == 1 and "callbacks=[gpufly.keras.ProfilerCallback()]" in hints[0]
    plain = cli("profile", str(script(tmp_path, "nothing.py", "print('no loop here')\n")))
    assert "iterated no torch DataLoader and made no optimizer step" in unwrapped(plain.stdout)
    assert "hint: mark the steps yourself" in plain.stderr and "keras" not in plain.stderr


# -- 8. a missing function is found before the script runs -------------------------------------------------------


def test_a_missing_function_is_found_before_the_file_runs_and_the_hint_names_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    train = script(tmp_path, "train.py", "print('the whole script ran')\ndef main():\n    pass\n")
    result = cli("profile", f"{train}:nofunc")
    assert result.code == 2 and "the whole script ran" not in result.stdout
    assert f"error: {train} has no function 'nofunc'" in result.stderr
    assert "hint: define def nofunc(): ..." in result.stderr and "def main" not in result.stderr
    near = cli("profile", f"{train}:mian")
    assert "did you mean main?" in near.stderr and "the whole script ran" not in near.stdout


@pytest.mark.parametrize(("source", "bound"), [
    ("def main(): pass", True),
    ("async def main(): pass", True),
    ("class main: pass", True),
    ("main = lambda: None", True),
    ("if True:\n    def main(): pass", True),
    ("try:\n    from x import main\nexcept ImportError:\n    pass", True),
    ("import main", True),
    ("def setup():\n    global main\n    main = print", True),
    ("from x import *", True),
    ("globals()['main'] = print", True),
    ("def __getattr__(name): return print", True),
    ("def other():\n    def main(): pass", False),
    ("class Box:\n    main = 1", False),
    ("print('main')", False),
], ids=["def", "async def", "class", "assignment", "in an if", "import in a try", "import", "global in a function",
        "star import", "globals()", "module __getattr__", "nested def", "class attribute", "only a string"])
def test_what_counts_as_a_top_level_name(tmp_path: Path, source: str, bound: bool) -> None:
    from gpufly.errors import GpuflyError
    from gpufly.profile.attach import _check_defined

    path = script(tmp_path, "m.py", source + "\n")
    if bound:
        _check_defined(f"{path}:main")
    else:
        with pytest.raises(GpuflyError, match="has no function 'main'"):
            _check_defined(f"{path}:main")


# -- 10. the noise floor needs steps -----------------------------------------------------------------------------


@pytest.mark.parametrize("measured", [1, 4, 5])
def test_the_noise_floor_is_not_estimated_from_too_few_steps(tmp_path: Path, measured: int) -> None:
    """A 1-step Keras run printed "noise floor: ... (p10-p90, 0% of the median)": one step has no spread to show."""
    from gpufly.profile.records import MIN_SPREAD_STEPS, ProfileData, StepRecord
    from gpufly.profile.render import noise_floor, receipt_lines, summary, write_html

    data = ProfileData(steps=[StepRecord(index=i, wall_s=0.010 + 0.001 * i) for i in range(measured)])
    noise = noise_floor(data)
    text = "\n".join(receipt_lines(summary(data, [])))
    write_html(tmp_path / "p.html", data, [])
    page = (tmp_path / "p.html").read_text()
    assert noise is not None
    if measured < MIN_SPREAD_STEPS:
        assert noise["spread"] is None and noise["p10_step_s"] is None and noise["noisy"] is False
        assert "% of the median" not in text
        assert f"noise floor: not estimated ({measured} measured step" in text and "needs 5 or more" in text
        assert 'class="noise-band"' not in page and 'class="median"' in page
    else:
        assert noise["spread"] is not None and "(p10-p90, " in text and 'class="noise-band"' in page
