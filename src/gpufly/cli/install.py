"""`gpufly install`: the exact install command for this machine (or another one), in the user's tool, from the
mirror they use."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from gpufly.cli.render import LANG_HELP, choose_language, console, print_json
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.doctor.facts import Facts
    from gpufly.doctor.install import InstallPlan, Sources

SCHEMA_VERSION = 1
FRAMEWORKS = ("torch", "tensorflow", "jax")
ALIASES = {"pytorch": "torch", "tf": "tensorflow"}


def _facts(saved: Path | None) -> Facts:
    """Saved facts, or this machine's; the plan needs the driver, GPUs and installed packages, not whether the
    frameworks import, so the imports are skipped."""
    from gpufly.doctor.facts import load_facts

    if saved is not None:
        return load_facts(saved)
    from gpufly.doctor.probes import probe_all

    return probe_all(import_frameworks=False)


def _plan(name: str, facts: Facts, cuda: str | None) -> InstallPlan:
    from gpufly.doctor import install as plans

    platform, python = plans.platform_of(facts.env), facts.env.python_version
    gpus = list(facts.gpus)
    if name == "torch":
        return plans.choose_torch(gpus, facts.driver, platform, python, cuda=cuda, machine=facts.env.machine)
    if name == "tensorflow":
        return plans.choose_tensorflow(gpus, facts.driver, platform, python, installed=facts.framework("tensorflow"),
                                       cuda=cuda)
    return plans.choose_jax(gpus, facts.driver, platform, facts.env, cuda=cuda)


def _sources(mirror: str | None, elsewhere: bool) -> Sources:
    """--mirror, and the index pip is set to use here; for another machine (--for) only --mirror: this machine's
    pip configuration says nothing about a CI image's."""
    from gpufly.doctor.install import choose_sources, read_pip_index

    configured = None if elsewhere else read_pip_index(os.environ, Path.home())
    return choose_sources(mirror, configured)


def _run_plan(plan: InstallPlan, out: Console | None) -> None:
    """Run the plan's pip command with this Python (the environment gpufly probed), as printed."""
    if plan.command is None:
        raise GpuflyError("nothing to run: no build works with this driver", hint=plan.advice, exit_code=1)
    if not plan.command.startswith("pip "):
        raise GpuflyError("this plan is not a single pip command; run its steps by hand", exit_code=1)
    args = [sys.executable, "-m", *shlex.split(plan.command)]
    if out is not None:
        out.print(_("running: {command}").format(command=shlex.join(args)), soft_wrap=True)
    try:
        done = subprocess.run(args, check=False)
    except OSError as exc:
        raise GpuflyError(f"could not start {sys.executable} -m pip: {exc}", exit_code=1) from exc
    if done.returncode != 0:
        raise GpuflyError(f"`{plan.command}` failed: pip exited with {done.returncode}",
                          hint="pip's messages above say why; nothing else was changed", exit_code=1)


def _check_options(tool: str, run: bool, facts_file: Path | None, target_file: Path | None) -> None:
    from gpufly.doctor.install import TOOLS

    if tool not in TOOLS:
        raise unknown_choice("tool", tool, TOOLS, hint=f"one of: {', '.join(TOOLS)}")
    if facts_file is not None and target_file is not None:
        raise GpuflyError("--facts and --for both name a facts file",
                          hint="--facts replays this machine's saved facts; --for plans for another machine: give one")
    if run and target_file is not None:
        raise GpuflyError("--run installs here, but --for plans for another machine",
                          hint="copy the printed command to that machine (a Dockerfile's RUN line), or drop --for")
    if run and tool != "pip":
        raise GpuflyError(f"--run runs pip commands only, not {tool}'s",
                          hint=f"run the printed {tool} command yourself, or use --tool pip --run")


def _render(plan: InstallPlan, out: Console, target_file: Path | None) -> None:
    """The command first; a manifest tool's snippet before the command that installs from it; uv's project snippet
    after its one-off command, as the other way to say the same."""
    if target_file is not None:
        out.print(_("for the machine in {path}:").format(path=target_file))
    manifest = plan.snippet is not None and plan.tool in ("pixi", "conda")
    if manifest and plan.snippet is not None:
        out.print(_("in {file}:").format(file=plan.snippet_file))
        out.print(plan.snippet.rstrip("\n"), soft_wrap=True)
        out.print(_("then run:"))
    if plan.command:
        out.print(plan.command, style="bold", soft_wrap=True)
    if plan.snippet is not None and not manifest:
        out.print(_("or, in a {tool} project, in {file}:").format(tool=plan.tool, file=plan.snippet_file))
        out.print(plan.snippet.rstrip("\n"), soft_wrap=True)
    out.print(plan.reason)
    if plan.advice:
        out.print(plan.advice, soft_wrap=True)
    for warning in plan.warnings:
        out.print(_("note: {text}").format(text=warning), soft_wrap=True)
    for alternative in plan.alternatives:
        out.print(_("or: {command}  ({why})").format(command=alternative.command, why=alternative.why), soft_wrap=True)


def install(
    framework: Annotated[str, typer.Argument(help="torch, tensorflow or jax.")],
    cuda: Annotated[str | None, typer.Option("--cuda", metavar="X.Y", help="Only builds for this CUDA.")] = None,
    tool: Annotated[str, typer.Option("--tool", metavar="TOOL",
                                      help="Write the command for pip, uv, pixi or conda.")] = "pip",
    mirror: Annotated[str | None, typer.Option("--mirror", metavar="NAME",
                                               help="Take packages from this mirror (tuna, aliyun, sjtu...); the "
                                                    "index pip is already set to use is honoured without it.")] = None,
    target_file: Annotated[Path | None, typer.Option("--for", metavar="FILE",
                                                     help="Plan for another machine (a CI image, a Docker target) "
                                                          "from its `gpufly doctor --save` facts.")] = None,
    run: Annotated[bool, typer.Option("--run", help="Run the command (otherwise it is only printed).")] = False,
    facts_file: Annotated[Path | None, typer.Option("--facts", metavar="FILE",
                                                    help="Plan for this machine's saved facts.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    lang: Annotated[str | None, typer.Option("--lang", metavar="LANG", help=LANG_HELP)] = None,
) -> None:
    """Print the exact pip command that installs FRAMEWORK with GPU support for this machine.

    Examples:
      gpufly install torch
      gpufly install torch --tool uv --mirror sjtu --lang zh
      gpufly install jax --cuda 12.4
      gpufly install torch --for ci-facts.json
    """
    from gpufly.doctor.install import Target, for_tool, platform_of

    choose_language(lang, json_out)
    name = ALIASES.get(framework.lower(), framework.lower())
    if name not in FRAMEWORKS:
        raise unknown_choice("framework", framework, FRAMEWORKS)
    tool = tool.lower()
    _check_options(tool, run, facts_file, target_file)
    sources = _sources(mirror, elsewhere=target_file is not None)
    facts = _facts(target_file or facts_file)
    target = Target(platform_of(facts.env), facts.env.machine, facts.env.python_version)
    plan = for_tool(_plan(name, facts, cuda), tool, sources, target)
    out = None if json_out else console()
    if out is None:
        print_json({"schema_version": SCHEMA_VERSION, "framework": name, "plan": plan.to_dict()})
    else:
        _render(plan, out, target_file)
    if run:
        _run_plan(plan, out)
