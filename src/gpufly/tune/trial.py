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
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from types import FrameType
from typing import Any

from gpufly.loading import dies_with, exit_text, kill_group, process_group
from gpufly.tune.energy import energy_cost_per_million, time_cost_per_million
from gpufly.tune.knobs import processes
from gpufly.tune.launch import Layout, loopback_agents

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
class RunFigures:
    """One run's timed figures (``TIMED``), kept for each run of a configuration measured more than once."""

    throughput: float | None = None
    median_step_throughput: float | None = None
    seconds: float = 0.0
    data_wait_share: float | None = None
    peak_memory_bytes: int | None = None
    energy_j: float | None = None
    joules_per_unit: float | None = None
    energy_note: str | None = None


TIMED = tuple(figure.name for figure in fields(RunFigures))
"""The figures one run of a configuration measured about its speed and cost: a row shows all of them from one run
(``TrialResult.show_median_run``), never one figure from one run and another from the next."""


def clip(text: str, chars: int) -> str:
    """``text`` cut to at most ``chars`` characters at a word boundary, with an ellipsis when cut (a single word
    longer than that is cut where it must be).

    >>> clip("the workload sets its own seed, so no seed drift is known", 30)
    'the workload sets its own…'
    >>> clip("short", 30), clip("abcdefghij", 5)
    ('short', 'abcd…')
    """
    if len(text) <= chars:
        return text
    room = text[:chars - 1]
    space = room.rfind(" ")
    cut = room[:space] if space > 0 else room
    return cut.rstrip(" ,;:-+") + "…"


@dataclass
class TrialResult:
    """What one trial measured, and the verdict the search gave it against the baseline."""

    name: str
    knobs: dict[str, Any]
    status: str
    """ok, unsafe, oom, failed or timeout."""
    throughput: float | None = None
    """Units over the wall time of the measured steps, stalls included. A configuration run more than once (the
    baseline, a candidate after its A/B rounds, the reference) shows its median run: this and every other timed
    figure (``TIMED``) come from that one run (``shown_run``)."""
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
    nodes: int | None = None
    """How many torchrun agents (nodes) its processes came from, as torchrun told them (``GROUP_WORLD_SIZE``)."""
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
    search_speedup: float | None = None
    """The speedup of the search's own run (its first comparison with the baseline), which A/B rounds leave as it was:
    what the plan decided on, so that a resumed run decides the same (None in files written before it was kept)."""
    rounds: int = 0
    """How many paired comparisons with the baseline the speedup rests on: 1 after the search, more once the
    trial was confirmed by A/B rounds."""
    noise_floor: float | None = None
    """On the baseline: the run-to-run spread of its throughputs (standard deviation of their logarithms)."""
    seed_loss_drift: float | None = None
    """On the baseline: how far the probe loss moved when it trained again with another seed (relative)."""
    seed_metric_drift: float | None = None
    """On the baseline: how far the evaluation metric moved with another seed (relative, either way)."""
    energy_j: float | None = None
    """Joules the trial's GPUs used over the measured steps, from NVML's energy counter (``gpufly.tune.energy``);
    None where nothing was measured (``energy_note`` says why)."""
    joules_per_unit: float | None = None
    """``energy_j`` over the units (samples, tokens) of the measured steps."""
    energy_note: str | None = None
    """Why the energy was not measured ("no NVML" on a CPU run)."""
    unjudged: str | None = None
    """On a trial that ran and was not found unsafe: why its accuracy could not be judged (``seeds 10.1% apart``:
    the baseline's two seeds end too far apart at this step count), so it is not called safe; None when judged."""
    dropped: str | None = None
    """On a stage of a staged plan: why the stages after it do not build on it (unsafe, or slower than the stage
    it built on beyond the noise); None for a stage kept in the cumulative chain."""
    runs: list[RunFigures] = field(default_factory=list)
    """The timed figures of each run of this configuration with its own seed, in order (the baseline's second seed
    is a row of its own): the row shows the median one's."""
    shown_run: int | None = None
    """Which of ``runs`` (from 1) the row's timed figures come from: the median run by throughput, the lower middle
    one of an even count."""
    paired_throughput: float | None = None
    paired_baseline: float | None = None
    """What the speedup is the ratio of: this configuration's throughput and the baseline's measured beside it (for
    one run of the search, the baseline interpolated between its runs just before and just after; after A/B rounds,
    the geometric means of the paired runs, whose ratio is the geometric mean of the per-pair ratios)."""
    pairs: int = 0
    """How many paired runs ``paired_throughput`` and ``paired_baseline`` hold (``rounds`` for a trial of the plan;
    the reference row's rounds beside the baseline)."""
    unsafe_because: str | None = None
    """On an unsafe trial: the measure that decided it and how far it moved (``metric dropped 27.5%``)."""

    @property
    def usable(self) -> bool:
        return self.status == "ok" and self.throughput is not None

    @property
    def verdict(self) -> str:
        """One word for the row: baseline, seed, safe, unjudged (ran, accuracy not judged), unsafe, or how it
        failed (oom, failed, timeout).

        >>> TrialResult("x", {}, "ok", throughput=1.0).verdict, TrialResult("x", {}, "ok", unjudged="seeds").verdict
        ('safe', 'unjudged')
        """
        if self.status != "ok":
            return self.status
        if self.role != "trial":
            return self.role
        return "unjudged" if self.unjudged else "safe"

    def timed(self) -> RunFigures:
        """This result's timed figures, as one run's."""
        return RunFigures(**{name: getattr(self, name) for name in TIMED})

    def add_run(self, run: TrialResult) -> None:
        """One more run of this configuration: kept with the others, and the row's timed figures become the median
        run's (all of them from that one run)."""
        if not self.runs:
            self.runs.append(self.timed())
        self.runs.append(run.timed())
        self.show_median_run()

    def show_median_run(self) -> None:
        """Set every timed figure (``TIMED``) from the median run by throughput: the lower middle one of an even
        count, so the row shows what one run measured, never a median no run produced.

        >>> r = TrialResult("b", {}, "ok", throughput=30.0, median_step_throughput=31.0)
        >>> for t in (10.0, 20.0, 40.0):
        ...     r.add_run(TrialResult("b", {}, "ok", throughput=t, median_step_throughput=t + 1))
        >>> r.throughput, r.median_step_throughput, r.shown_run
        (20.0, 21.0, 3)
        """
        measured = [i for i, run in enumerate(self.runs) if run.throughput is not None]
        if not measured:
            return
        ordered = sorted(measured, key=lambda i: self.runs[i].throughput or 0.0)
        index = ordered[(len(ordered) - 1) // 2]
        for name in TIMED:
            setattr(self, name, getattr(self.runs[index], name))
        self.shown_run = index + 1

    def samples_per_dollar(self, price_per_hour: float | None) -> float | None:
        """Units one dollar of machine time buys at this trial's throughput: an hour's units over the hour's price.

        >>> r = TrialResult("x", {}, "ok", throughput=1000.0)
        >>> r.samples_per_dollar(2.0), r.samples_per_dollar(None)
        (1800000.0, None)
        """
        if self.throughput is None or not price_per_hour or price_per_hour <= 0:
            return None
        return self.throughput * 3600 / price_per_hour

    def to_dict(self, price_per_hour: float | None = None, price_per_kwh: float | None = None) -> dict[str, Any]:
        """The row the CLI prints as JSON and the HTML page shows, with the energy per unit and what a million
        units cost in energy at ``price_per_kwh`` and in machine time at ``price_per_hour``; a staged trial adds
        its stage, its held-out loss (the metric, under the case study's name) and samples per dollar."""
        row = {"configuration": self.name, "knobs": self.knobs, "status": self.status, "role": self.role,
               "throughput": self.throughput, "median_step_throughput": self.median_step_throughput,
               "unit": self.unit, "throughputs": self.throughputs, "speedup": self.speedup,
               "speedup_interval": (None if self.speedup_low is None or self.speedup_high is None
                                    else [self.speedup_low, self.speedup_high]),
               "rounds": self.rounds, "peak_memory_bytes": self.peak_memory_bytes, "loss_drift": self.loss_drift,
               "eval_metric": self.eval_metric, "metric_drop": self.metric_drop, "world_size": self.world_size,
               "nodes": self.nodes, "error": self.error, "seconds": round(self.seconds, 2), "energy_j": self.energy_j,
               "joules_per_unit": self.joules_per_unit, "energy_note": self.energy_note,
               "energy_cost_per_million": energy_cost_per_million(self.joules_per_unit, price_per_kwh),
               "time_cost_per_million": time_cost_per_million(self.throughput, price_per_hour),
               "verdict": self.verdict, "unjudged": self.unjudged, "unsafe_because": self.unsafe_because,
               "paired_throughput": self.paired_throughput, "paired_baseline": self.paired_baseline,
               "pairs": self.pairs, "runs": [asdict(run) for run in self.runs], "shown_run": self.shown_run}
        if self.stage is not None:
            row = {"stage": self.stage, **row, "kept": self.dropped is None, "dropped": self.dropped,
                   "held_out_loss": self.eval_metric,
                   "samples_per_dollar": self.samples_per_dollar(price_per_hour)}
        return row


Runner = Callable[[Trial], TrialResult]
"""Runs one trial and returns what happened; the search takes any (a fake one in tests)."""


MEASURED = ("throughput", "unit", "peak_memory_bytes", "data_wait_share", "losses", "eval_loss", "batch_size",
            "device_memory_bytes", "median_step_throughput", "eval_metric", "higher_is_better", "world_size",
            "nodes", "energy_j", "joules_per_unit", "energy_note")
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
    nodes: int = 1
    """How many torchrun agents a DDP trial runs as on this machine, each standing for a node and all meeting at a
    c10d rendezvous on 127.0.0.1 (``run_as_nodes``); the ``ddp`` processes split evenly over them. 1: one
    standalone torchrun."""

    def __call__(self, trial: Trial) -> TrialResult:
        request = json.dumps({"workload": self.workload, "knobs": trial.knobs, "steps": self.steps,
                              "device": self.device, "seed": trial.seed})
        started = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "GPUFLY_TUNE_REQUEST": request, TUNER_PID: str(os.getpid())}
        command = [sys.executable, "-m", "gpufly.tune.worker"]
        count = processes(trial.knobs)
        if count > 1:  # DDP: torchrun starts the processes (gloo on CPU, NCCL on GPUs)
            env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
            if self.nodes > 1:
                return self.run_as_nodes(trial, count, env, started)
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

    def run_as_nodes(self, trial: Trial, count: int, env: dict[str, str], started: float) -> TrialResult:
        """The DDP trial as ``nodes`` torchrun agents on loopback, a multi-node job in miniature: the rendezvous,
        the store and the ranks' process group cross agents as they would cross nodes. The port is one the kernel
        had free a moment before; should another process take it in between, the trial runs again on another."""
        if count % self.nodes:
            return TrialResult(trial.name, trial.knobs, "failed", seed=trial.seed,
                               error=f"ddp={count} processes do not split over {self.nodes} nodes")
        deadline = started + self.timeout_s
        for attempt in range(PORT_ATTEMPTS):
            port = free_port()
            agents = loopback_agents(Layout(self.nodes, count // self.nodes), port,
                                     f"gpufly-{os.getpid()}-{port}-{attempt}", sys.executable)
            ended = run_agents(agents, env, deadline - time.monotonic())
            if ended is None:
                return TrialResult(trial.name, trial.knobs, "timeout", error=f"no result within {self.timeout_s:g} s",
                                   seconds=time.monotonic() - started, seed=trial.seed)
            returncode, stdout, stderr = ended
            if returncode == 0 or not port_taken(stderr):
                break
        return outcome(trial, returncode, stdout, stderr, time.monotonic() - started)


PORT_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel has free on ``host`` now (it may give it away again once the socket closes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_taken(stderr: str) -> bool:
    """Whether the rendezvous store could not listen because another process had the port."""
    return "EADDRINUSE" in stderr or "address already in use" in stderr.lower()


def run_agents(commands: list[list[str]], env: dict[str, str], timeout_s: float) -> tuple[int, str, str] | None:
    """Run the agents together and return (exit code, their stdout, their stderr), the first agent to fail
    first; None when the time ran out. The output goes to files, so no agent blocks on a full pipe while another
    is waited for."""
    with contextlib.ExitStack() as stack:
        outputs = [(stack.enter_context(tempfile.TemporaryFile("w+")),
                    stack.enter_context(tempfile.TemporaryFile("w+"))) for _ in commands]
        with one_group(commands, outputs, env) as agents:
            codes = wait_for(agents, timeout_s)
        if codes is None:
            return None
        order = sorted(range(len(commands)), key=lambda i: codes.get(i, 0) == 0)
        texts = [(_read(outputs[i][0]), _read(outputs[i][1])) for i in order]
    failed = next((code for code in codes.values() if code != 0), 0)
    return failed, "".join(out for out, _ in texts), "".join(err for _, err in texts)


def _read(file: Any) -> str:
    file.seek(0)
    return str(file.read())


@contextlib.contextmanager
def one_group(commands: list[list[str]], outputs: list[tuple[Any, Any]],
              env: dict[str, str]) -> Iterator[list[subprocess.Popen[str]]]:
    """Start each command in one new process group, led by the first, each armed to die with this process (as
    ``gpufly.loading.process_group`` does for one command); however the block is left, the group is killed and
    every agent reaped. A group, not a session of its own, so the later agents can join it; out of the
    terminal's foreground group all the same, so Ctrl-C reaches the tuner only. Each agent is the tuner's own
    child, which is what its ranks check before they arm their own death signal (``die_with_launcher``)."""
    arm = dies_with(os.getpid())
    agents: list[subprocess.Popen[str]] = []
    try:
        for command, (stdout, stderr) in zip(commands, outputs, strict=True):
            agents.append(subprocess.Popen(command, process_group=agents[0].pid if agents else 0, preexec_fn=arm,
                                           stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=True, env=env))
        yield agents
    finally:
        if agents:
            kill_group(agents[0])  # the group the first agent leads, and every agent in it
        for agent in agents[1:]:
            agent.wait()


def wait_for(agents: list[subprocess.Popen[str]], timeout_s: float) -> dict[int, int] | None:
    """Each agent's exit code by its index once all ended, or as soon as one failed (the others would wait for it
    at the rendezvous or in a collective until their own, longer, timeouts); None if the time ran out first.
    A thread per agent waits for it, and this thread for the first of them: no polling."""
    ended: queue.Queue[tuple[int, int]] = queue.Queue()
    for index, agent in enumerate(agents):
        threading.Thread(target=lambda i=index, a=agent: ended.put((i, a.wait())), daemon=True).start()
    deadline = time.monotonic() + timeout_s
    codes: dict[int, int] = {}
    while len(codes) < len(agents):
        try:
            index, code = ended.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        codes[index] = code
        if code != 0:
            break
    return codes


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
                               error=f"the trial's last line is not a result: {clip(lines[-1], 80)}")
        measured = {key: data[key] for key in MEASURED if data.get(key) is not None}
        return TrialResult(trial.name, trial.knobs, "ok", seconds=seconds, seed=trial.seed, **measured)
    status = "oom" if "out of memory" in stderr.lower() else "failed"
    return TrialResult(trial.name, trial.knobs, status, error=clip(error_line(stderr), 300), seconds=seconds,
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
    return root_cause(lines) or (lines[-1] if lines else "exited with no message")


def root_cause(lines: list[str]) -> str | None:
    """How torchrun's first failed rank ended, from the "Root Cause" part of its banner, when the rank printed no
    exception: killed by a signal (a crash in C++ code, the kernel's out-of-memory killer) or an exit code alone.

    >>> root_cause(["Root Cause (first observed failure):", "[0]:", "rank      : 1 (local_rank: 1)",
    ...             "exitcode  : -9 (pid: 2254)  (SIGKILL)", "traceback : Signal 9 (SIGKILL) received by PID 2254"])
    'rank 1 crashed with SIGKILL, with no message'
    >>> root_cause(["Root Cause (first observed failure):", "rank      : 0 (local_rank: 0)", "exitcode  : 1 (pid: 7)"])
    'rank 0 exited with code 1, with no message'
    """
    start = next((i for i, line in enumerate(lines) if line.startswith("Root Cause")), None)
    if start is None:
        return None
    fields = {key.strip(): value for key, value in (line.split(":", 1) for line in lines[start + 1:]
                                                    if re.match(r"^\w+\s*:", line))}
    rank = fields.get("rank", "").split("(")[0].strip() or "?"
    code = re.match(r"\s*(-?\d+)", fields.get("exitcode", ""))
    if code is None:
        return None
    return f"rank {rank} {exit_text(int(code.group(1)))}, with no message"
