"""`gpufly profile`: the script's arguments are the script's, a stop signal saves the run, sys.exit("msg") is shown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import gpufly
from tests.conftest import CLI_COLUMNS, PROCESS_TIMEOUT_S

ARGV_SCRIPT = """import json, sys
print("argv=" + json.dumps(sys.argv[1:]))
if "--save" in sys.argv:
    with open(sys.argv[sys.argv.index("--save") + 1], "w") as checkpoint:
        checkpoint.write("the script's own checkpoint")
"""

LOOP = """import os, signal, sys, torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, num_workers={workers})
step = 0
while True:
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        step += 1
        if step == 6:
            {at_step_6}
"""


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def script_argv(stdout: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if line.startswith("argv="))
    return json.loads(line.removeprefix("argv="))


@pytest.mark.parametrize("after", [
    ["--save", "ckpt.pt"], ["--save=ckpt.pt"], ["--warmup", "5"], ["--json"], ["--html", "page.html"],
    ["--trace", "2"], ["--help"], ["-h"], ["--verbose", "--save", "ckpt.pt"], ["--epochs", "2", "--", "-x"],
], ids=lambda after: " ".join(after))
def test_every_option_after_the_script_reaches_the_script_untouched(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    after: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("profile", str(script(tmp_path, "train.py", ARGV_SCRIPT)), *after)
    assert result.code == 0, result.stderr
    assert script_argv(result.stdout) == after
    assert "Usage:" not in result.stdout, "the script's --help is not gpufly's"
    assert {path.name for path in tmp_path.iterdir()} <= {"train.py", "ckpt.pt"}, "gpufly wrote nothing of its own"


def test_the_scripts_save_path_keeps_the_scripts_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    checkpoint, profile = tmp_path / "ckpt.pt", tmp_path / "run.json"
    result = cli("profile", "--save", str(profile), str(script(tmp_path, "train.py", ARGV_SCRIPT)),
                 "--save", str(checkpoint))
    assert result.code == 0, result.stderr
    assert checkpoint.read_text() == "the script's own checkpoint", "never overwritten with the profile"
    assert json.loads(profile.read_text())["schema_version"] == 1


def test_options_before_the_script_are_gpuflys(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    train = script(tmp_path, "train.py", ARGV_SCRIPT)
    saved, page = tmp_path / "run.json", tmp_path / "run.html"
    result = cli("profile", "--json", "--warmup", "1", "--save", str(saved), f"--html={page}", str(train), "--lr", "3")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["exit_code"] == 0, "--json: stdout is one JSON document"
    assert 'argv=["--lr", "3"]' in result.stderr, "the script's prints go to stderr with --json"
    assert json.loads(saved.read_text())["command"] == f"{train} --lr 3"
    assert "<title>gpufly profile</title>" in page.read_text()
    for own in (["--trace", "-1"], ["--warmup", "-1"]):
        refused = cli("profile", *own, str(train))
        assert refused.code == 2 and "--warmup and --trace must be zero or more" in refused.stderr
    assert script_argv(cli("profile", "--verbose", str(train)).stdout) == []
    for asked in ("--help", "-h"):
        shown = cli("profile", asked, str(train))
        assert shown.code == 0 and "Usage: gpufly profile [OPTIONS]" in shown.stdout
        assert "argv=" not in shown.stdout, "help is printed, the script not run"


def test_an_unknown_option_before_the_script_is_an_error_not_a_target(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("profile", "--bogus", str(script(tmp_path, "train.py", ARGV_SCRIPT)))
    assert result.code == 2 and "No such option: --bogus" in result.stderr
    assert "argv=" not in result.stdout


@pytest.mark.parametrize(("line", "at"), [
    (["train.py", "--save", "x"], 0), (["--json", "train.py", "--json"], 1), (["--save", "a.json", "t.py"], 2),
    (["--save=a.json", "--warmup", "2", "m:f", "-h"], 3), (["--", "-odd.py"], 1), (["--json"], 1),
])
def test_target_at_says_where_gpuflys_part_of_the_line_ends(line: list[str], at: int) -> None:
    from gpufly.cli.profile import target_at

    assert target_at(line) == at


def test_a_scripts_exit_message_goes_to_stderr_as_python_prints_it(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("profile", str(script(tmp_path, "stop.py", 'import sys\nsys.exit("bad config: no data")\n')))
    assert result.code == 1
    assert "bad config: no data" in result.stderr.splitlines()


@pytest.fixture
def children_handler() -> Iterator[None]:
    """A stop leaves SIGCHLD at its default for the rest of the process (which is ending); a test process goes on."""
    handler = signal.getsignal(signal.SIGCHLD)
    yield
    signal.signal(signal.SIGCHLD, handler)


@pytest.mark.usefixtures("children_handler")
def test_sigterm_in_process_saves_the_run_and_exits_143(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    saved = tmp_path / "run.json"
    handler = signal.getsignal(signal.SIGTERM)
    train = script(tmp_path, "loop.py", LOOP.format(workers=0, at_step_6="os.kill(os.getpid(), signal.SIGTERM)"))
    result = cli("profile", "--warmup", "1", "--save", str(saved), str(train))
    assert result.code == 143, result.stderr
    data = json.loads(saved.read_text())
    assert len(data["steps"]) == 6 and data["exit_code"] == 143 and data["crash"] == "Stopped: SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == handler, "the previous handler is back"


@pytest.mark.usefixtures("children_handler")
def test_a_script_that_catches_exception_does_not_swallow_the_stop(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stop = "try:\n                os.kill(os.getpid(), signal.SIGTERM)\n            except Exception:\n" \
           "                print('swallowed')"
    result = cli("profile", str(script(tmp_path, "loop.py", LOOP.format(workers=0, at_step_6=stop))))
    assert result.code == 143 and "swallowed" not in result.stdout


def as_at_a_terminal() -> None:
    """SIGINT at its default in the child, as in a terminal's foreground: a shell starting the tests in the background
    without job control (``cmd &`` in a script) leaves it ignored, Python then installs no KeyboardInterrupt handler,
    and Ctrl-C's signal would never reach the script."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize(("sent", "code", "workers", "to_group"), [
    (signal.SIGTERM, 143, 0, False), (signal.SIGINT, 130, 0, False), (signal.SIGTERM, 143, 2, True),
], ids=["SIGTERM", "SIGINT", "SIGTERM to the process group, with DataLoader workers"])
def test_a_stop_signal_to_a_real_process_saves_the_profile(tmp_path: Path, sent: signal.Signals, code: int,
                                                           workers: int, to_group: bool) -> None:
    saved = tmp_path / "run.json"
    train = script(tmp_path, "loop.py", LOOP.format(workers=workers, at_step_6="print('ready', flush=True)"))
    environment = {**os.environ, "COLUMNS": CLI_COLUMNS}
    with subprocess.Popen([sys.executable, "-m", "gpufly", "profile", "--save", str(saved), str(train)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                          start_new_session=True, preexec_fn=as_at_a_terminal) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n", "the script runs its loop before the signal"
            if to_group:  # as systemd's control-group stop and `kill -- -PID` do
                os.killpg(child.pid, sent)
            else:
                child.send_signal(sent)
            stdout, stderr = child.communicate(timeout=PROCESS_TIMEOUT_S)
        finally:
            child.kill()
    assert child.returncode == code, stderr
    data = json.loads(saved.read_text())
    assert data["exit_code"] == code and len(data["steps"]) >= 6
    assert data["crash"] == {signal.SIGTERM: "Stopped: SIGTERM", signal.SIGINT: "KeyboardInterrupt"}[sent]
    assert "the loop stopped with" in stdout
    assert str(Path(gpufly.__file__).parent) not in stderr, "no traceback through gpufly"
