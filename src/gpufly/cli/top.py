"""`gpufly top`: the terminal monitor, or one snapshot for scripts with --once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufly.cli.monitoring import check_history, check_interval
from gpufly.cli.render import error_console, print_json
from gpufly.errors import GpuflyError
from gpufly.extras import require

if TYPE_CHECKING:
    from gpufly.monitor import Snapshot


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit (like gpustat).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --once: the snapshot as JSON.")] = False,
    interval: Annotated[float, typer.Option("--interval", "-i", help="Seconds between samples.")] = 1.0,
    replay: Annotated[Path | None, typer.Option(help="Show a recording (from `gpufly watch`) instead.")] = None,
    history: Annotated[int, typer.Option(help="Samples of history kept for the sparklines.")] = 600,
) -> None:
    """Watch the GPUs, their processes and the host live; keys: m/u/p sort, / filter, ? help, q quit."""
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
