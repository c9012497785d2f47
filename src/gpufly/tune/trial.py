"""A trial: one configuration run in its own Python process, and what came back as a ``TrialResult``.

Each trial runs ``python -m gpufly.tune.worker`` (under torchrun for DDP) with a timeout, so an out-of-memory
error, a compile failure or a hang becomes a recorded result and the search goes on. This module is the
parent's side: it never imports the worker (nor torch); the request goes out as JSON and one JSON line
comes back.

A trial's processes never outlive the tuner: the trial leads a session of its own (``gpufly.loading.
process_group``), killed whole on a timeout, an exception, or a SIGTERM/SIGINT of the tuner (``stop_signals``
turns those into ``Stopped`` in the search), and each of its processes is armed to be SIGKILLed by the kernel
when its parent dies, which covers a SIGKILL of the tuner, where no handler runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from gpufly.loading import process_group
from gpufly.tune.knobs import processes

TUNER_PID = "GPUFLY_TUNER_PID"
"""The environment variable that tells a torchrun rank which process its launcher must belong to."""


@dataclass(frozen=True)
class Trial:
    """A configuration to measure: a name for people, the knobs (and workload options) for the worker."""

    name: str
    knobs: dict[str, Any]
    seed: int = 0
    """The initial weights' seed: 0 for every trial; the baseline trains once more with another, to see how far
    the probe loss moves from the seed alone."""

    @property
    def key(self) -> str:
        """Identifies a configuration (and its seed, when not 0) in the results file, whatever it is called."""
        return json.dumps(self.knobs if not self.seed else {"knobs": self.knobs, "seed": self.seed}, sort_keys=True)


@dataclass
class TrialResult:
    """What one trial measured, and the verdict the search gave it against the baseline."""

    name: str
    knobs: dict[str, Any]
    status: str
    """ok, unsafe, oom, failed or timeout."""
    throughput: float | None = None
    """Units over the wall time of the measured steps, stalls included; after A/B rounds, the median of the
    configuration's runs (``throughputs``)."""
    unit: str = "samples"
    peak_memory_bytes: int | None = None
    data_wait_share: float | None = None
    losses: list[float] = field(default_factory=list)
    """The training loss per step (for the curve)."""
    eval_loss: float | None = None
    """Loss on fixed probe batches after training on the same samples as every other trial."""
    loss_drift: float | None = None
    error: str | None = None
    seconds: float = 0.0
    speedup: float | None = None
    batch_size: int | None = None
    """The trial's global batch size, as the worker ran it."""
    device_memory_bytes: int | None = None
    """The GPU's total memory (None on a CPU): with the peak, what tells how large a batch fits."""
    median_step_throughput: float | None = None
    """The median over the measured steps of each step's rate: a diagnostic that hides stalls (far above the
    throughput, it says some steps stalled)."""
    eval_metric: float | None = None
    """The workload's ``evaluate(model)`` after training; None when it has none."""
    higher_is_better: bool = True
    metric_drop: float | None = None
    """Relative move of the metric the bad way from the baseline's (positive: worse)."""
    world_size: int | None = None
    """How many processes the trial ran on, as the worker saw it (2 for ddp=2)."""
    stage: str | None = None
    """For a staged plan (the recsys case study): baseline, data, compute or communication."""
    seed: int = 0
    role: str = "trial"
    """trial; baseline (the reference every trial is judged against); or seed (the baseline trained again with
    another seed: its throughput is one more baseline run, its probe loss the seed-to-seed drift)."""
    throughputs: list[float] = field(default_factory=list)
    """Every throughput measured for this configuration in the run, in order: the baseline's, interleaved with
    the trials, give the noise floor; a candidate's, its A/B rounds."""
    speedup_low: float | None = None
    speedup_high: float | None = None
    """The speedup's 95% interval (``gpufly.tune.noise.ratio_interval``)."""
    rounds: int = 0
    """How many paired comparisons with the baseline the speedup rests on: 1 after the search, more once the
    trial was confirmed by A/B rounds."""
    noise_floor: float | None = None
    """On the baseline: the run-to-run spread of its throughputs (standard deviation of their logarithms)."""
    seed_loss_drift: float | None = None
    """On the baseline: how far the probe loss moved when it trained again with another seed (relative)."""
    seed_metric_drift: float | None = None
    """On the baseline: how far the evaluation metric moved with another seed (relative, either way)."""

    @property
    def usable(self) -> bool:
        return self.status == "ok" and self.throughput is not None

    def samples_per_dollar(self, price_per_hour: float | None) -> float | None:
        """Units one dollar of machine time buys at this trial's throughput: an hour's units over the hour's price.

        >>> r = TrialResult("x", {}, "ok", throughput=1000.0)
        >>> r.samples_per_dollar(2.0), r.samples_per_dollar(None)
        (1800000.0, None)
        """
        if self.throughput is None or not price_per_hour or price_per_hour <= 0:
            return None
        return self.throughput * 3600 / price_per_hour

    def to_dict(self, price_per_hour: float | None = None) -> dict[str, Any]:
        """The row the CLI prints as JSON and the HTML page shows; a staged trial adds its stage, its held-out
        loss (the metric, under the case study's name) and samples per dollar at ``price_per_hour``."""
        row = {"configuration": self.name, "knobs": self.knobs, "status": self.status, "role": self.role,
               "throughput": self.throughput, "median_step_throughput": self.median_step_throughput,
               "unit": self.unit, "throughputs": self.throughputs, "speedup": self.speedup,
               "speedup_interval": (None if self.speedup_low is None or self.speedup_high is None
                                    else [self.speedup_low, self.speedup_high]),
               "rounds": self.rounds, "peak_memory_bytes": self.peak_memory_bytes, "loss_drift": self.loss_drift,
               "eval_metric": self.eval_metric, "metric_drop": self.metric_drop, "world_size": self.world_size,
               "error": self.error, "seconds": round(self.seconds, 2)}
        if self.stage is not None:
            row = {"stage": self.stage, **row, "held_out_loss": self.eval_metric,
                   "samples_per_dollar": self.samples_per_dollar(price_per_hour)}
        return row


Runner = Callable[[Trial], TrialResult]
"""Runs one trial and returns what happened; the search takes any (a fake one in tests)."""


MEASURED = ("throughput", "unit", "peak_memory_bytes", "data_wait_share", "losses", "eval_loss", "batch_size",
            "device_memory_bytes", "median_step_throughput", "eval_metric", "higher_is_better", "world_size")
"""The worker's JSON keys that a TrialResult keeps."""


@dataclass(frozen=True)
class SubprocessRunner:
    """Runs each trial of ``workload`` in a fresh interpreter (torchrun for DDP) and turns whatever happens there
    into a TrialResult: the worker's measurement, or an oom, failed or timeout result with the error line.

    Each trial leads a process group of its own, killed whole when the trial ends, times out, or the runner is
    left by an exception (``Stopped`` included); call it from the thread that waits for it (the death signal
    that kills the trial with the tuner is tied to the thread that started it)."""

    workload: str
    steps: int = 30
    device: str | None = None
    timeout_s: float = 300.0

    def __call__(self, trial: Trial) -> TrialResult:
        request = json.dumps({"workload": self.workload, "knobs": trial.knobs, "steps": self.steps,
                              "device": self.device, "seed": trial.seed})
        started = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUFLY_TUNE_REQUEST": request, TUNER_PID: str(os.getpid())}
        command = [sys.executable, "-m", "gpufly.tune.worker"]
        count = processes(trial.knobs)
        if count > 1:  # DDP: torchrun starts the processes (gloo on CPU, NCCL on GPUs)
            env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={count}",
                       "-m", "gpufly.tune.worker"]
        with process_group(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env) as process:
            try:
                stdout, stderr = process.communicate(request, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:  # leaving the block kills the trial's whole group
                return TrialResult(trial.name, trial.knobs, "timeout",
                                   error=f"no result within {self.timeout_s:g} s", seconds=time.monotonic() - started,
                                   seed=trial.seed)
        return outcome(trial, process.returncode, stdout, stderr, time.monotonic() - started)


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived while the tuner ran. A BaseException, as KeyboardInterrupt is, so no ``except
    Exception`` on the way takes it for a failed trial: the running trial's group is killed as it passes
    (``process_group``) and the search records nothing for that trial."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by this signal: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise ``Stopped`` in the main thread while the block runs (SIGTERM is a normal stop, as
    for any service); the handlers that were there are put back after. Elsewhere than in the main thread, where
    Python allows no handler, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def outcome(trial: Trial, returncode: int, stdout: str, stderr: str, seconds: float) -> TrialResult:
    """A finished worker process as a TrialResult: its last JSON line when it succeeded, else its error."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if returncode == 0 and lines:
        try:
            data = json.loads(lines[-1])
        except json.JSONDecodeError:  # the workload printed a line of its own that starts with "{"
            return TrialResult(trial.name, trial.knobs, "failed", seconds=seconds,
                               error=f"the trial's last line is not a result: {lines[-1][:80]}")
        measured = {key: data[key] for key in MEASURED if data.get(key) is not None}
        return TrialResult(trial.name, trial.knobs, "ok", seconds=seconds, seed=trial.seed, **measured)
    status = "oom" if "out of memory" in stderr.lower() else "failed"
    return TrialResult(trial.name, trial.knobs, status, error=error_line(stderr)[:300], seconds=seconds,
                       seed=trial.seed)


def error_line(stderr: str) -> str:
    """The exception a trial died of: under torchrun, the first rank's, not the launcher's banner.

    >>> error_line("[rank0]: ValueError: bad\\ntorch...ChildFailedError: \\n"), error_line("")
    ('ValueError: bad', 'exited with no message')
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^(\[rank\d+\]: )?[\w.]*(Error|Exception)\b", line)
              and "ChildFailedError" not in line]
    if errors:
        return re.sub(r"^\[rank\d+\]: ", "", errors[0])
    return lines[-1] if lines else "exited with no message"
