"""`gpufly profile`: run a script or an entry point with the profiler attached, then say what holds it back.

Everything after the target belongs to the target, as `python -m cProfile`, `py-spy` and `torchrun` read their
lines: `gpufly profile --save run.json train.py --save ckpt.pt` saves the profile to run.json and hands
``--save ckpt.pt`` to the script. gpufly's own options go before the target.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufly.cli.paths import check_writable
from gpufly.cli.render import OutputClosed, OutputConsole, drop_pending_output, error_console, print_note
from gpufly.errors import GpuflyError
from gpufly.extras import require

if TYPE_CHECKING:
    from gpufly.profile.records import ProfileData

profile = typer.Typer(add_completion=False)
"""The command, as an app of one command so that it carries its own parsing rule: options stop at the target."""


@profile.command(name="profile", context_settings={"allow_interspersed_args": False})
def run_profile(
    target: Annotated[str, typer.Argument(help="path/train.py, or module:function (file.py:function).")],
    args: Annotated[list[str] | None, typer.Argument(help="Arguments for the script, all of them passed on as "
                                                          "given (its own --help, --save, --verbose too).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary and measurements as JSON.")] = False,
    html: Annotated[Path | None, typer.Option(help="Also write an HTML page with the step-time chart.")] = None,
    save: Annotated[Path | None, typer.Option(help="Write the measurements (for `gpufly report --profile`).")] = None,
    trace: Annotated[int, typer.Option(help="Summarize a torch.profiler window of this many steps.")] = 0,
    warmup: Annotated[int, typer.Option(help="Steps left out of the statistics.")] = 3,
) -> None:
    """Profile a training or inference script without changing it; exits with the script's own exit code.

    gpufly's options go before the script, everything after it is the script's (its own --help too).

    SIGTERM and Ctrl-C stop the script; what was measured is still reported and saved (exit 143 and 130).

    Examples:
      gpufly profile train.py
      gpufly profile --html profile.html train.py --epochs 1
      gpufly profile --save run.json mypkg.train:main
    """
    if warmup < 0 or trace < 0:
        raise GpuflyError("--warmup and --trace must be zero or more", "for example --warmup 3 --trace 5")
    for option, path in (("--html", html), ("--save", save)):
        if path is not None:
            check_writable(option, path, example="profile.json" if option == "--save" else "profile.html")
    require("torch", "gpufly profile")
    from gpufly.profile.attach import run
    from gpufly.profile.profiler import Profiler

    profiler = Profiler(warmup=warmup, trace_steps=trace)
    outcome = run(target, list(args or []), profiler, quiet_stdout=as_json)
    failed_writes = _report(profiler.data, as_json, html, save)
    errors = [message for message in (outcome.error, failed_writes) if message]
    if errors:  # one `error:` line, last: the script's exception and the step, or a file that could not be written
        from gpufly.profile.render import write_hint

        raise GpuflyError("; ".join(errors), outcome.hint if outcome.error else write_hint(),
                          exit_code=outcome.code or 2)  # a failed script's own code wins
    if outcome.hint:
        print_hint(outcome.hint)
    raise typer.Exit(outcome.code)


def _report(data: ProfileData, as_json: bool, html: Path | None, save: Path | None) -> str | None:
    """Write --save and --html, then print the report; the writes that failed, as one message (raised by the caller
    after the script's own error, if any, so that the run ends in one `error:` line).

    The files come first: a reader that went away (`| head -1`) or a full disk under stdout must not cost them. A
    reader gone ends the printing in silence, the script's exit code kept; a full disk is the entry point's one line.
    """
    from gpufly.profile.render import print_json_report, print_report, write_outputs
    from gpufly.profile.rules import diagnose

    findings = diagnose(data)
    written = write_outputs(data, findings, html=html, save=save)
    if written.kept:
        print_note(written.kept_note())
    try:
        if as_json:
            print_json_report(data, findings)
        else:
            print_report(data, findings, console=OutputConsole())  # Rich's own look; a closed pipe raised here
        sys.stdout.flush()
    except OutputClosed:
        drop_pending_output()
    return "; ".join(written.errors) or None


def target_at(args: list[str]) -> int:
    """Where the target stands in the arguments after ``profile`` (their length when there is none): what comes
    before it is gpufly's, the rest the script's. For the root command, which reads ``--verbose`` itself."""
    command = typer.main.get_command(profile)
    options = [param for param in command.params if param.param_type_name == "option"]
    takes_value = {name for option in options if not option.is_flag for name in option.opts}  # type: ignore[attr-defined]
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if not arg.startswith("-") or arg == "-":
            return index
        index += 2 if arg in takes_value else 1
    return len(args)


def print_hint(text: str) -> None:
    """A `hint:` line on stderr, after the report: what to do about a run that measured no step."""
    error_console().print(f"hint: {text}", markup=False)
