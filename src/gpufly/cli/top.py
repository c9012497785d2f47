"""`gpufly top`: the terminal monitor, or one snapshot for scripts with --once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufly.cli.monitoring import check_history, check_interval
from gpufly.cli.render import error_console, print_json, print_note
from gpufly.errors import GpuflyError
from gpufly.extras import require

if TYPE_CHECKING:
    from gpufly.monitor import Snapshot

INTERVAL_S = 1.0
HISTORY = 600


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit (like gpustat).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: the snapshot as JSON.")] = False,
    interval: Annotated[float | None, typer.Option("--interval", "-i", show_default=False,
                                                   help=f"Seconds between samples. Default: {INTERVAL_S:g}.")] = None,
    replay: Annotated[Path | None, typer.Option(help="Show a recording (from `gpufly watch`) instead.")] = None,
    history: Annotated[int | None, typer.Option(show_default=False, help="Samples of history kept for the "
                                                f"sparklines. Default: {HISTORY}.")] = None,
) -> None:
    """Watch the GPUs, their processes and the host live; keys: m/u/p sort, / filter, ? help, q quit.

    On a small terminal (80x24) the screen turns compact, two lines per GPU, to keep the process table in view.

    Examples:
      gpufly top
      gpufly top --interval 0.5
      gpufly top --once --json
      gpufly top --replay run.jsonl
    """
    _note_unused(once, interval, history)
    interval = INTERVAL_S if interval is None else interval
    history = HISTORY if history is None else history
    check_interval(interval)
    check_history(history)
    if as_json and not once:
        raise GpuflyError("--json prints one snapshot, so it needs --once", "gpufly top --once --json")
    if not once:
        require("textual", "gpufly top")
    from gpufly.monitor import open_backend

    backend = open_backend(replay, loop=True)
    if once:
        try:
            _print_once(backend.snapshot(), as_json)
        finally:
            backend.close()
        return
    if not sys.stdout.isatty():
        backend.close()
        raise GpuflyError("gpufly top draws a live screen and needs a terminal",
                          "in a script or pipe use `gpufly top --once` (or --once --json)")
    from gpufly.monitor.tui import TopApp

    TopApp(backend, interval=interval, history=history).run()


def _note_unused(once: bool, interval: float | None, history: int | None) -> None:
    """--once takes one snapshot: no interval between samples, no history behind sparklines."""
    given = [name for name, value in (("--interval", interval), ("--history", history)) if value is not None]
    if once and given:
        print_note(f"--once takes one snapshot; {', '.join(given)} ignored")


def _print_once(snapshot: Snapshot, as_json: bool) -> None:
    from gpufly.monitor.format import no_gpu_line
    from gpufly.monitor.views import once_json, once_lines

    if as_json:
        print_json(once_json(snapshot))
        return
    line = no_gpu_line(snapshot)
    if line:
        error_console().print(line, markup=False)
    print("\n".join(once_lines(snapshot)))
