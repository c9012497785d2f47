"""`gpufly watch`: a sample per interval, to a JSONL or CSV file (flushed per line) or to the terminal."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from gpufly.cli.monitoring import Stop, StopSignals, check_interval, check_rotate
from gpufly.cli.render import error_console
from gpufly.errors import GpuflyError


def _line(snapshot: object) -> str:
    """One terminal line per sample: time, then each GPU's utilization, memory, power and slowdown."""
    from gpufly.monitor.format import fmt_bytes, fmt_number, slowdown_text
    from gpufly.monitor.sample import Snapshot

    assert isinstance(snapshot, Snapshot)
    stamp = time.strftime("%H:%M:%S", time.localtime(snapshot.time))
    parts = []
    for gpu in snapshot.gpus:
        if gpu.lost:
            parts.append(f"[{gpu.index}] lost")
            continue
        parts.append(f"[{gpu.index}] {fmt_number(gpu.utilization_gpu_percent, '%')} "
                     f"{fmt_bytes(gpu.memory_used_bytes)}/{fmt_bytes(gpu.memory_total_bytes)} "
                     f"{fmt_number(gpu.power_w, ' W')} {fmt_number(gpu.temperature_c, ' C')} "
                     f"slowdown {slowdown_text(gpu)}")
    host = snapshot.host
    parts.append(f"host cpu {fmt_number(host.cpu_percent, '%')} ram {fmt_bytes(host.memory_used_bytes)}")
    return f"{stamp}  " + "  ".join(parts)


def watch(
    interval: Annotated[float, typer.Option("--interval", "-i", help="Seconds between samples.")] = 1.0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Append to FILE.jsonl or FILE.csv.")] = None,
    rotate: Annotated[float | None, typer.Option(help="Start a new file past this many MB (keeps 5 old ones).")] = None,
    count: Annotated[int | None, typer.Option(help="Stop after this many samples (default: until Ctrl-C).")] = None,
    replay: Annotated[Path | None, typer.Option(help="Sample a recording instead of this machine.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each sample as a JSON line.")] = False,
) -> None:
    """Record the GPUs (and host) every interval; each line is flushed, so a kill loses nothing written."""
    check_interval(interval)
    rotate_bytes = check_rotate(rotate)
    if count is not None and count <= 0:
        raise GpuflyError(f"--count must be positive, not {count}", "leave it out to run until Ctrl-C")
    from gpufly.monitor.format import no_gpu_line
    from gpufly.monitor.logger import SampleLog, jsonl_lines
    from gpufly.monitor.sampler import open_backend

    log = SampleLog(output, rotate_bytes=rotate_bytes) if output else None
    backend = open_backend(replay, loop=True)
    taken = 0
    try:
        with StopSignals() as signals:
            while count is None or taken < count:
                started = time.monotonic()
                snapshot = backend.snapshot()
                if taken == 0 and (line := no_gpu_line(snapshot)):
                    error_console().print(line, markup=False)
                signals.begin_write()
                if log is not None:
                    log.write(snapshot)
                elif as_json:
                    sys.stdout.write(jsonl_lines(snapshot)[0])
                    sys.stdout.flush()
                else:
                    print(_line(snapshot), flush=True)
                taken += 1
                signals.end_write()
                if count is None or taken < count:
                    time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except (KeyboardInterrupt, Stop):
        pass
    finally:
        backend.close()
        if log is not None:
            try:
                log.close()
            finally:
                error_console().print(f"wrote {log.lines_written} samples to {output}", markup=False)
