"""Entry point: the Typer app, its command groups, and one place that turns errors into words."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpufly import __version__
from gpufly.cli.render import error_console
from gpufly.errors import GpuflyError


@dataclass(frozen=True)
class CommandEntry:
    """A command: where its function (or Typer sub-app) lives, and the one line `gpufly --help` lists for it."""

    target: str
    """``module:attribute`` of the command function, or of a Typer app for a command group."""
    summary: str
    """The first line of the command's docstring (a test keeps the two equal)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """Click context settings for the command."""


COMMANDS: dict[str, CommandEntry] = {
    "gpus": CommandEntry("gpufly.cli.gpus:app", "The GPU catalog and ladder."),
    "report": CommandEntry("gpufly.cli.report:report", "Report on this machine: OS, CPU, RAM, each NVIDIA GPU with "
                           "its catalog entry, the doctor's verdict, which popular models fit; with --bench, what "
                           "the machine measures."),
    "fit": CommandEntry("gpufly.cli.advise:fit", "Will MODEL fit on a GPU for this job? Memory breakdown, predicted "
                        "speed, and what would make it fit."),
    "recommend": CommandEntry("gpufly.cli.advise:recommend",
                              "Rank catalog GPUs (and how many of each) that fit MODEL for this job."),
    "models": CommandEntry("gpufly.cli.advise:models", "List the preset models."),
    "doctor": CommandEntry("gpufly.cli.doctor:doctor", "Find what does not fit together in the driver, CUDA and "
                           "framework stack, and how to fix it."),
    "install": CommandEntry("gpufly.cli.doctor:install", "Print the exact pip command that installs FRAMEWORK with "
                            "GPU support for this machine."),
    "bench": CommandEntry("gpufly.cli.bench:bench", "Measure matmul rates per precision, memory and PCIe bandwidth, "
                          "launch latency and attention, beside the catalog's peaks."),
    "top": CommandEntry("gpufly.cli.top:top", "Watch the GPUs, their processes and the host live; keys: m/u/p sort, "
                        "/ filter, ? help, q quit."),
    "tune": CommandEntry("gpufly.cli.tune:tune", "Measure each optimization on the workload, reject any that changes "
                         "the loss, print the best safe one."),
    # The script's own options follow it untouched: `gpufly profile --json train.py --epochs 2`.
    "profile": CommandEntry("gpufly.cli.profile:profile", "Profile a training or inference script without changing "
                            "it; exits with the script's own exit code.", {"ignore_unknown_options": True}),
    "watch": CommandEntry("gpufly.cli.watch:watch", "Record the GPUs (and host) every interval; each line is "
                          "flushed, so a kill loses nothing written."),
    "serve": CommandEntry("gpufly.cli.serve:serve", "Serve Prometheus metrics (DCGM-exporter names) and a live web "
                          "dashboard; read-only, until Ctrl-C."),
}
"""Every command, in the order `gpufly --help` lists them. A command's module is imported only when it runs (or
its own --help is asked for), so `gpufly --help` and each command start without loading the others."""


def build_command(name: str) -> TyperCommand | TyperGroup:
    """The click command for ``name``, built from its function (or sub-app) as Typer builds any command."""
    entry = COMMANDS[name]
    module, _, attribute = entry.target.partition(":")
    target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_command(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name=name, context_settings=entry.settings or None)(target)
        command = typer.main.get_command(single)
    command.name = name
    assert isinstance(command, TyperCommand | TyperGroup)
    return command


class _Commands(Mapping[str, Any]):
    """The root group's commands, built on first lookup; its keys (for "did you mean") cost nothing."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._built:
            self._built[name] = build_command(name)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class LazyGroup(TyperGroup):
    """The root command group: lists every command from COMMANDS, builds one only when it is used."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()  # type: ignore[assignment]
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:  # the root help page needs each command's one line, not the command
            summary = COMMANDS[cmd_name].summary
            return TyperCommand(name=cmd_name, help=summary, short_help=summary)
        return self.commands[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=LazyGroup,
    # The root page in click's plain layout: Typer's Rich layout loads rich.markdown and markdown-it first, 60 ms
    # of a 150 ms start. Each command's own --help keeps the Rich layout.
    rich_markup_mode=None,
    name="gpufly",
    help="Make GPUs fly for AI work: choose the hardware, set up the software, make it fast, watch it run.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


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
    except typer.TyperException as exc:  # click's usage errors (public base class of typer's vendored click)
        _fail(exc.format_message(), "run with --help to see the options", exc.exit_code)
    except typer.Abort:
        _fail("aborted", None, 130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(result if isinstance(result, int) else 0)
