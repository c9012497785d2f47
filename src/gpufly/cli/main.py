"""Entry point: the Typer app, its command groups, and one place that turns errors into words."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpufly import __version__
from gpufly.cli.render import (
    GuardedOutput,
    OutputClosed,
    OutputFailed,
    degrade_unencodable,
    drop_pending_output,
    error_console,
)
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
    "report": CommandEntry("gpufly.cli.report:report", "Report on this machine: what the hardware is worth for AI, "
                           "whether the software is set up right, what it reaches, what fits and how fast, and what "
                           "to do next."),
    "fit": CommandEntry("gpufly.cli.advise:fit", "Will MODEL fit on a GPU for this job? Memory breakdown, predicted "
                        "speed, and what would make it fit."),
    "recommend": CommandEntry("gpufly.cli.advise:recommend",
                              "Rank catalog GPUs (and how many of each) that fit MODEL for this job."),
    "models": CommandEntry("gpufly.cli.advise:models", "List the preset models."),
    "doctor": CommandEntry("gpufly.cli.doctor:doctor", "Find what does not fit together in the driver, CUDA and "
                           "framework stack, and how to fix it."),
    "fleet": CommandEntry("gpufly.cli.fleet:app", "Many nodes' doctor facts and bench runs side by side: what differs, "
                          "which GPU falls behind."),
    "install": CommandEntry("gpufly.cli.install:install", "Print the exact pip command that installs FRAMEWORK with "
                            "GPU support for this machine."),
    "bench": CommandEntry("gpufly.cli.bench:bench", "Measure matmul rates per precision, memory and PCIe bandwidth, "
                          "launch latency and attention, beside the catalog's peaks."),
    "top": CommandEntry("gpufly.cli.top:top", "Watch the GPUs, their processes and the host live; keys: m/u/p sort, "
                        "/ filter, ? help, q quit."),
    "tune": CommandEntry("gpufly.cli.tune:tune", "Measure each optimization on the workload, reject any that changes "
                         "the loss, print the best safe one."),
    # The script's own options follow it untouched: gpufly.cli.profile parses only up to the script.
    "profile": CommandEntry("gpufly.cli.profile:profile", "Profile a training or inference script without changing "
                            "it; exits with the script's own exit code."),
    "watch": CommandEntry("gpufly.cli.watch:watch", "Record the GPUs (and host) every interval; each line is "
                          "flushed, so a kill loses nothing written."),
    "serve": CommandEntry("gpufly.cli.serve:serve", "Serve Prometheus metrics (DCGM-exporter names) and a live web "
                          "dashboard; read-only, until Ctrl-C or SIGTERM."),
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
    refuse_empty_values(command)
    return command


def refuse_empty_values(command: TyperCommand | TyperGroup) -> None:
    """Make every string, path and name parameter of ``command`` (and of its subcommands) refuse ``''``.

    An empty value is a mistake (an unset shell variable: `--gpu "$GPU"`), never "not given": taken as absent,
    `fit --gpu ''` would answer for the whole catalog. Done here, for every command at once, so a new option is
    covered without a line of its own. A variadic argument (the script's own arguments after `profile SCRIPT`)
    belongs to someone else and is left alone.
    """
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            refuse_empty_values(sub)
    for param in command.params:
        if param.nargs != -1 and not getattr(param, "is_flag", False) and not getattr(param, "count", False):
            param.callback = _refusing_empty(param.callback)


def _refusing_empty(callback: Callable[..., Any] | None) -> Callable[..., Any]:
    def check(ctx: Any, param: Any, value: Any) -> Any:
        values = value if isinstance(value, tuple | list) else (value,)
        if any(isinstance(item, str) and not item.strip() for item in values):
            if param.param_type_name == "option":
                name = param.opts[0]
                raise GpuflyError(f"{name} is empty", hint=f"give {name} a value, or leave {name} out for its default")
            name = (param.metavar or param.name or "").upper()
            raise GpuflyError(f"{name} is empty", hint=f"give {name} a value (see --help)")
        return callback(ctx, param, value) if callback is not None else value

    return check


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
    try:
        err.print(f"error: {message}", markup=False)
        if hint:
            err.print(f"hint: {hint}", markup=False)
    except OSError:  # stderr is full or closed too: the exit code is all that can still be said
        pass
    sys.exit(exit_code)


def _gpufly_part(args: list[str]) -> int:
    """How much of the command line is gpufly's (where `--verbose` is read): all of it, except after `profile`'s
    target, where the rest belongs to the script (`gpufly profile train.py --verbose` passes it on)."""
    command = next((index for index, arg in enumerate(args) if not arg.startswith("-")), None)
    if command is None or args[command] != "profile":
        return len(args)
    from gpufly.cli.profile import target_at

    return command + 1 + target_at(args[command + 1:])


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes end in `error:`/`hint:` lines and exit 2, never a traceback; output that cannot
    be written (a full disk) is one `error:` line and exit 1; a closed pipe (`gpufly gpus | head -1`) is silence
    and exit 0, as for any Unix filter."""
    args = list(sys.argv[1:] if argv is None else argv) or ["--help"]  # bare `gpufly`: the command list, exit 0
    end = _gpufly_part(args)
    verbose = "--verbose" in args[:end]
    args = [a for a in args[:end] if a != "--verbose"] + args[end:]
    for stream in (sys.stdout, sys.stderr):
        degrade_unencodable(stream)
    stdout = sys.stdout
    guarded = GuardedOutput.around(stdout)
    sys.stdout = guarded  # type: ignore[assignment]
    try:
        result = app(args=args, standalone_mode=False, prog_name="gpufly")
        sys.stdout.flush()
    except OutputFailed as exc:
        drop_pending_output()
        _fail(f"could not write the output: {exc.strerror}", exc.hint, 1)
    except GpuflyError as exc:
        if verbose:
            raise
        _fail(exc.message, exc.hint, exc.exit_code)
    except typer.TyperException as exc:  # click's usage errors (public base class of typer's vendored click)
        _fail(exc.format_message(), "run with --help to see the options", exc.exit_code)
    except typer.Abort:
        _fail("aborted", None, 130)
    except OutputClosed:
        drop_pending_output()
        sys.exit(0)
    except SystemExit as exc:
        if exc.code == 1 and getattr(guarded, "reader_gone", False):  # Rich's own answer to a closed pipe
            sys.exit(0)
        raise
    finally:
        sys.stdout = stdout
    sys.exit(result if isinstance(result, int) else 0)
