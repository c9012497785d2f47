"""`gpufly profile`: run a script or an entry point with the profiler attached, then say what holds it back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufly.cli.paths import check_writable
from gpufly.errors import GpuflyError
from gpufly.extras import require


def profile(
    target: Annotated[str, typer.Argument(help="path/train.py, or module:function (file.py:function).")],
    args: Annotated[list[str] | None, typer.Argument(help="Arguments for the script.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary and measurements as JSON.")] = False,
    html: Annotated[Path | None, typer.Option(help="Also write an HTML page with the step-time chart.")] = None,
    save: Annotated[Path | None, typer.Option(help="Write the measurements (for `gpufly report --profile`).")] = None,
    trace: Annotated[int, typer.Option(help="Summarize a torch.profiler window of this many steps.")] = 0,
    warmup: Annotated[int, typer.Option(help="Steps left out of the statistics.")] = 3,
) -> None:
    """Profile a training or inference script without changing it; exits with the script's own exit code."""
    if warmup < 0 or trace < 0:
        raise GpuflyError("--warmup and --trace must be zero or more", "for example --warmup 3 --trace 5")
    for option, path in (("--html", html), ("--save", save)):
        if path is not None:
            check_writable(option, path, example="profile.json" if option == "--save" else "profile.html")
    require("torch", "gpufly profile")
    from gpufly.profile.attach import run
    from gpufly.profile.profiler import Profiler
    from gpufly.profile.render import emit

    profiler = Profiler(warmup=warmup, trace_steps=trace)
    code = run(target, list(args or []), profiler, quiet_stdout=as_json)
    try:
        emit(profiler.data, as_json=as_json, html=html, save=save)
    except GpuflyError as exc:
        exc.exit_code = code or exc.exit_code  # a failed script's own code still wins
        raise
    raise typer.Exit(code)
