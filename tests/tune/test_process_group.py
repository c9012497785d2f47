"""A trial's processes die with the tuner: SIGTERM and SIGINT stop the run as a normal stop (the trial running is
killed with its group and not recorded; exit 143 or 130), SIGKILL of the tuner takes its trials along (the kernel's
parent-death signal), and under DDP the torchrun launcher and each of its ranks go too.

The real-process tests wait for what the trial writes (its pid), never for a fixed time, and give every wait a
deadline generous enough for a busy 2-core machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufly.tune.trial import Stopped, stop_signals
from tests.conftest import CLI_COLUMNS, PROCESS_TIMEOUT_S
from tests.test_loading import gone

BLOCKING = '''
import json
import os
import time
from pathlib import Path

import torch

from gpufly.tune.workload import Workload


def workload(options):
    """Trains until the loss is called in a trial that must block: it leaves its pid (and under torchrun its
    launcher's) in GPUFLY_TEST_PIDS, then sleeps."""
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(512, 4), torch.randn(512, 1))

    def loss(model, batch):
        knobs = json.loads(os.environ["GPUFLY_TUNE_REQUEST"])["knobs"]
        if os.environ["GPUFLY_TEST_BLOCK"] == "all" or knobs:
            pids = Path(os.environ["GPUFLY_TEST_PIDS"])
            if "LOCAL_RANK" in os.environ:
                (pids / f"launcher-{os.getppid()}").touch()
            (pids / f"trial-{os.getpid()}").touch()
            time.sleep(600)
        inputs, targets = batch
        return torch.nn.functional.mse_loss(model(inputs), targets)

    return Workload(name="blocking", model=torch.nn.Linear(4, 1), dataset=data, loss=loss, batch_size=32)
'''


def test_a_stop_signal_raises_stopped_with_the_shell_s_exit_code_and_the_handler_is_put_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped) as caught, stop_signals():
        signal.raise_signal(signal.SIGTERM)  # in this thread, at once: the handler runs before the next line
    assert caught.value.exit_code == 143 and str(caught.value) == "SIGTERM"
    assert Stopped(signal.SIGINT).exit_code == 130
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.fixture
def blocking(tmp_path: Path) -> Path:
    path = tmp_path / "blocking.py"
    path.write_text(BLOCKING)
    (tmp_path / "pids").mkdir()
    return path


def pids(folder: Path, prefix: str, count: int) -> list[int]:
    """The pids ``count`` processes left in ``folder`` as ``PREFIX-PID`` files, waiting for them as long as it takes
    (within the generous process deadline)."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while time.monotonic() < deadline:
        found = [int(p.name.rpartition("-")[2]) for p in folder.glob(f"{prefix}-*")]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {count} {prefix} pid files in {folder} within {PROCESS_TIMEOUT_S:g} s")


def start_tune(blocking: Path, results: Path, block: str, *options: str) -> subprocess.Popen[str]:
    env = {**os.environ, "COLUMNS": CLI_COLUMNS, "GPUFLY_TEST_PIDS": str(blocking.parent / "pids"),
           "GPUFLY_TEST_BLOCK": block}
    return subprocess.Popen([sys.executable, "-m", "gpufly", "tune", f"{blocking}:workload", "--steps", "4",
                             "--device", "cpu", "--results", str(results), *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def stop(process: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    process.send_signal(signum)
    return process.communicate(timeout=PROCESS_TIMEOUT_S)


@pytest.mark.slow
def test_sigterm_stops_the_trial_records_nothing_for_it_and_resume_never_runs_a_kept_trial_again(
        blocking: Path, tmp_path: Path) -> None:
    results = tmp_path / "trials.jsonl"
    tuner = start_tune(blocking, results, "after-baseline")
    [trial] = pids(tmp_path / "pids", "trial", 1)
    _, err = stop(tuner, signal.SIGTERM)
    assert tuner.returncode == 143, err
    assert "error: stopped by SIGTERM" in err and "--resume" in err and "Traceback" not in err
    assert gone(trial), "the trial running was killed with the tuner"
    kept = [json.loads(line).get("name") for line in results.read_text().splitlines()[1:]]
    assert set(kept) == {"baseline", "baseline (seed 1)"}, "the stopped trial is recorded nowhere"
    for leftover in (tmp_path / "pids").iterdir():
        leftover.unlink()
    again = start_tune(blocking, results, "after-baseline", "--resume")
    [second] = pids(tmp_path / "pids", "trial", 1)
    _, err = stop(again, signal.SIGINT)
    assert again.returncode == 130 and "stopped by SIGINT" in err, err
    assert gone(second)
    again_kept = [json.loads(line).get("name") for line in results.read_text().splitlines()[1:]]
    assert again_kept[:len(kept)] == kept and set(again_kept[len(kept):]) <= {"baseline"}, (
        "only the baseline ran again (its noise floor: a fresh run before this session's first trial); the second "
        "seed came from the file and the stopped trials are recorded nowhere")


@pytest.mark.slow
def test_sigkill_of_the_tuner_takes_its_trial_along(blocking: Path, tmp_path: Path) -> None:
    tuner = start_tune(blocking, tmp_path / "trials.jsonl", "all")
    [trial] = pids(tmp_path / "pids", "trial", 1)
    stop(tuner, signal.SIGKILL)
    assert gone(trial), "the kernel killed the trial when the tuner died"


RUNNER = """
import sys
from gpufly.tune import SubprocessRunner, Trial
from gpufly.tune.trial import stop_signals
with stop_signals():
    SubprocessRunner(sys.argv[1], steps=4, device="cpu", timeout_s=600)(Trial("ddp", {"ddp": 2}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_ddp_trial_s_launcher_and_ranks_die_with_the_tuner(blocking: Path, tmp_path: Path, signum: int) -> None:
    """torchrun starts each rank in a session of its own: the ranks die through their own parent-death signal."""
    env = {**os.environ, "GPUFLY_TEST_PIDS": str(tmp_path / "pids"), "GPUFLY_TEST_BLOCK": "all"}
    tuner = subprocess.Popen([sys.executable, "-c", RUNNER, f"{blocking}:workload"], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ranks = pids(tmp_path / "pids", "trial", 2)
    [launcher] = set(pids(tmp_path / "pids", "launcher", 1))
    stop(tuner, signum)
    assert all(gone(pid) for pid in [launcher, *ranks])
