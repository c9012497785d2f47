"""`gpufly watch`: a sample per interval, to a JSONL or CSV file (flushed per line) or to the terminal.

The loop is the monitor's ``Sampler`` run in the foreground; the file log and the terminal printer are
its listeners, each write guarded so a SIGTERM or Ctrl-C never lands between writing a sample and counting it.
With ``--attribute`` each GPU process carries its Slurm job or pod, and with ``--attribute`` or
``--price-per-kwh`` the run ends with its energy (and cost) per GPU and per job (``gpufly.monitor.energy``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufly.cli.monitoring import Stop, StopSignals, check_interval, check_rotate
from gpufly.cli.render import error_console, print_note
from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.monitor import Snapshot
    from gpufly.monitor.energy import JobLedger
    from gpufly.monitor.health import Health
    from gpufly.monitor.sampler import History, Listener


def _line(snapshot: Snapshot, verdicts: dict[int, Health] | None = None) -> str:
    """One terminal line per sample: time, then each GPU's utilization, memory, power and slowdown, its health
    when not HEALTHY (the reasons' codes), and its processes' jobs when attributed."""
    from gpufly.monitor.format import fmt_bytes, fmt_number, slowdown_text
    from gpufly.monitor.health import Level

    stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.time))
    parts = []
    for gpu in snapshot.gpus:
        if gpu.lost:
            parts.append(f"[{gpu.index}] lost" + (f" ({gpu.unavailable})" if gpu.unavailable else ""))
            continue
        verdict = verdicts.get(gpu.index) if verdicts else None
        health = "" if verdict is None or verdict.level is Level.HEALTHY else \
            f" {verdict.level.name} ({','.join(reason.code for reason in verdict.reasons)})"
        jobs = sorted({process.job for process in gpu.processes if process.job})
        parts.append(f"[{gpu.index}] {fmt_number(gpu.utilization_gpu_percent, '%')} "
                     f"{fmt_bytes(gpu.memory_used_bytes)}/{fmt_bytes(gpu.memory_total_bytes)} "
                     f"{fmt_number(gpu.power_w, ' W')} {fmt_number(gpu.temperature_c, ' C')} "
                     f"slowdown {slowdown_text(gpu)}{health}" + (f" jobs {','.join(jobs)}" if jobs else ""))
    host = snapshot.host
    parts.append(f"host cpu {fmt_number(host.cpu_percent, '%')} ram {fmt_bytes(host.memory_used_bytes)}")
    return f"{stamp}  " + "  ".join(parts)


def _json_printer() -> Listener:
    """Print each sample as a JSONL line, judged by a ``HealthWatch`` that sees every sample (rules that need a
    sustained condition read the last few)."""
    from gpufly.monitor.health import HealthWatch
    from gpufly.monitor.logger import jsonl_lines

    health = HealthWatch()

    def print_json(snapshot: Snapshot) -> None:
        sys.stdout.write(jsonl_lines(snapshot, health.update(snapshot))[0])
        sys.stdout.flush()

    return print_json


def _line_printer() -> Listener:
    """Print a line per sample, with the verdict of a ``HealthWatch`` that sees every sample."""
    from gpufly.monitor.health import HealthWatch

    health = HealthWatch()

    def print_line(snapshot: Snapshot) -> None:
        print(_line(snapshot, health.update(snapshot)), flush=True)

    return print_line


def _first_sample_notice() -> Listener:
    """Says once, on stderr, that there is no GPU to watch (the host is still recorded)."""
    from gpufly.monitor.format import no_gpu_line

    seen = False

    def notice(snapshot: Snapshot) -> None:
        nonlocal seen
        if not seen and (line := no_gpu_line(snapshot)):
            error_console().print(line, markup=False)
        seen = True

    return notice


def _guarded(signals: StopSignals, write: Listener) -> Listener:
    """``write``, with SIGTERM/Ctrl-C held until the sample is written (then the run stops)."""

    def listener(snapshot: Snapshot) -> None:
        signals.begin_write()
        write(snapshot)
        signals.end_write()

    return listener


def _note_unused(output: Path | None, rotate: float | None, as_json: bool) -> None:
    """--rotate rotates the --output file, and --json shapes what goes to the terminal: without --output the one
    has nothing to rotate, with it the other has nothing to shape."""
    if rotate is not None and output is None:
        print_note("--rotate applies to an --output file; without one it is ignored")
    if as_json and output is not None:
        print_note("--json shapes lines on the terminal; with --output the file's own format is written (ignored)")


def watch(
    interval: Annotated[float, typer.Option("--interval", "-i", help="Seconds between samples.")] = 1.0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Append to FILE.jsonl or FILE.csv.")] = None,
    rotate: Annotated[float | None, typer.Option(help="Start a new file past this many MB (keeps 5 old ones).")] = None,
    count: Annotated[int | None, typer.Option(help="Stop after this many samples (default: until Ctrl-C).")] = None,
    replay: Annotated[Path | None, typer.Option(help="Sample a recording instead of this machine.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each sample as a JSON line.")] = False,
    attribute: Annotated[str | None, typer.Option(
        metavar="SOURCES",
        help="Record the Slurm job or Kubernetes pod of each GPU process (slurm, k8s, or both comma-separated), "
             "and end with each job's energy. Reads /proc/PID/environ and /proc/PID/cgroup: run as root.")] = None,
    price_per_kwh: Annotated[float | None, typer.Option(
        "--price-per-kwh", metavar="PRICE",
        help="Price of a kilowatt-hour: end with the energy and cost per GPU (and per job, with --attribute).")]
    = None,
    currency: Annotated[str | None, typer.Option(
        metavar="CODE", help="ISO 4217 code of --price-per-kwh (default USD).")] = None,
) -> None:
    """Record the GPUs (and host) every interval; each line is flushed, so a kill loses nothing written.

    Examples:
      gpufly watch -o gpus.jsonl
      gpufly watch --interval 5 -o gpus.csv --rotate 100
      gpufly watch --count 10 --json
      gpufly watch -o run.jsonl --attribute slurm --price-per-kwh 0.12 --currency EUR
    """
    check_interval(interval)
    rotate_bytes = check_rotate(rotate)
    _note_unused(output, rotate, as_json)
    if count is not None and count <= 0:
        raise GpuflyError(f"--count must be positive, not {count}", "leave it out to run until Ctrl-C")
    from gpufly.monitor import History, LiveBackend, SampleLog, Sampler, open_backend
    from gpufly.monitor.attribution import sources_for
    from gpufly.monitor.energy import JobLedger, price_from_options

    sources = sources_for(attribute, replaying=replay is not None)
    price = price_from_options(price_per_kwh, currency)
    log = SampleLog(output, rotate_bytes=rotate_bytes) if output else None
    backend = open_backend(replay, loop=True) if replay else LiveBackend(attribute=sources)
    write: Listener = log.write if log is not None else _json_printer() if as_json else _line_printer()
    ledger = JobLedger(price) if sources or price is not None else None
    history = History(capacity=2)
    try:
        with StopSignals() as signals:
            sampler = Sampler(backend, interval=interval, history=history,
                              listeners=[_first_sample_notice(), *([_guarded(signals, ledger)] if ledger else []),
                                         _guarded(signals, write)])
            sampler.run(count=count)
    except (KeyboardInterrupt, Stop):
        pass
    finally:
        backend.close()
        try:
            if log is not None:
                try:
                    log.close()
                finally:
                    error_console().print(f"wrote {log.lines_written} samples to {output}", markup=False)
        finally:
            if ledger is not None:
                _print_summary(history, ledger, attributed=bool(sources))


def _print_summary(history: History, ledger: JobLedger, attributed: bool) -> None:
    """The run's energy (and cost) per GPU and per job, on stderr after the samples."""
    from gpufly.monitor.energy import run_summary

    summary = run_summary(history.latest, history.energy_since_start_j, ledger, ledger.price)
    for line in summary.lines(attributed or bool(summary.jobs)):
        error_console().print(line, markup=False)
