"""Entry point: the Typer app, its command groups, and one place that turns errors into words."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer._click.exceptions import ClickException

from gpufly import __version__
from gpufly.cli import advise, bench, doctor, gpus, profile, report, serve, top, tune, watch
from gpufly.cli.render import error_console
from gpufly.errors import GpuflyError

app = typer.Typer(
    name="gpufly",
    help="Make GPUs fly for AI work: choose the hardware, set up the software, make it fast, watch it run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(gpus.app, name="gpus")
app.command(name="report")(report.report)
app.command(name="fit")(advise.fit)
app.command(name="recommend")(advise.recommend)
app.command(name="models")(advise.models)
app.command(name="doctor")(doctor.doctor)
app.command(name="install")(doctor.install)
app.command(name="bench")(bench.bench)
app.command(name="top")(top.top)
app.command(name="tune")(tune.tune)
# The script's own options follow it untouched: `gpufly profile --json train.py --epochs 2`.
app.command(name="profile", context_settings={"ignore_unknown_options": True})(profile.profile)
app.command(name="watch")(watch.watch)
app.command(name="serve")(serve.serve)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufly {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_show_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Make GPUs fly for AI work: choose the hardware, set up the software, make it fast, watch it run."""


def _fail(message: str, hint: str | None, exit_code: int) -> None:
    err = error_console()
    err.print(f"error: {message}", markup=False)
    if hint:
        err.print(f"hint: {hint}", markup=False)
    sys.exit(exit_code)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes end in `error:`/`hint:` lines and exit 2, never a traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args
    try:
        result = app(args=[a for a in args if a != "--verbose"], standalone_mode=False, prog_name="gpufly")
    except GpuflyError as exc:
        if verbose:
            raise
        _fail(exc.message, exc.hint, exc.exit_code)
    except ClickException as exc:
        _fail(exc.format_message(), "run with --help to see the options", exc.exit_code)
    except typer.Abort:
        _fail("aborted", None, 130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(result if isinstance(result, int) else 0)
