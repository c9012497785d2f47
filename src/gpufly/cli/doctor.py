"""`gpufly doctor` and `gpufly install`: diagnose the GPU software stack and print the right install."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufly.cli.render import console, print_json, print_note
from gpufly.errors import GpuflyError, unknown_choice

if TYPE_CHECKING:
    from gpufly.doctor.checks import Finding
    from gpufly.doctor.facts import Facts
    from gpufly.doctor.install import InstallPlan

SCHEMA_VERSION = 1
_STYLE = {"fail": "bold red", "warn": "yellow", "ok": "green"}


def _facts(saved: Path | None, import_frameworks: bool = True) -> Facts:
    from gpufly.doctor.facts import load_facts

    if saved is not None:
        return load_facts(saved)
    from gpufly.doctor.probes import probe_all

    return probe_all(import_frameworks=import_frameworks)


def render_findings(findings: list[Finding], out: Console) -> None:
    """The findings as a numbered table, then each fix on a line of its own below it.

    A fix is often a command; inside a table cell it would be cut or broken across lines at any
    usual terminal width, so it is printed whole (soft-wrapped: the terminal folds it, a copy gets
    one line).
    """
    table = Table(box=box.SIMPLE_HEAD, show_header=True, title="gpufly doctor", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for number, finding in enumerate(findings, start=1):
        what = Text(finding.what)
        if finding.why:
            what.append("\n" + finding.why, style="dim")
        table.add_row(str(number), Text(finding.status, style=_STYLE[finding.status]), what)
    out.print(table)
    fixes = [(number, finding.fix) for number, finding in enumerate(findings, start=1) if finding.fix]
    if fixes:
        out.print("fixes:")
        for number, fix in fixes:
            out.print(f"  {number}. {fix}", soft_wrap=True)
    fails = sum(f.status == "fail" for f in findings)
    warns = sum(f.status == "warn" for f in findings)
    out.print(f"{fails} failed, {warns} warnings, {len(findings) - fails - warns} ok")


def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Also run a matmul smoke test on each GPU.")] = False,
    save: Annotated[Path | None, typer.Option("--save", metavar="FILE", help="Write the facts to FILE.")] = None,
    facts_file: Annotated[Path | None, typer.Option("--facts", metavar="FILE",
                                                    help="Diagnose saved facts instead of this machine.")] = None,
) -> None:
    """Find what does not fit together in the driver, CUDA and framework stack, and how to fix it."""
    from gpufly.doctor.checks import diagnose, smoke_findings

    facts = _facts(facts_file)
    if save is not None:
        facts.save(save)
    findings = diagnose(facts)
    if deep and facts_file is not None:
        print_note("--deep skipped: the smoke test runs on this machine's GPUs, not on saved facts")
    if deep and facts_file is None:
        from gpufly.doctor.smoke import run_isolated

        results, error = run_isolated() if facts.gpus else ([], None)
        findings = sorted(findings + smoke_findings(results, error, facts),
                          key=lambda f: {"fail": 0, "warn": 1, "ok": 2}[f.status])
    failed = any(f.status == "fail" for f in findings)
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "ok": not failed, "findings": [f.to_dict() for f in findings],
                    "facts": facts.to_dict()})
    else:
        out = console()
        render_findings(findings, out)
        if save is not None:
            out.print(f"facts written to {save}: send them with a bug report, or replay with --facts")
    if failed:
        raise typer.Exit(1)


FRAMEWORKS = ("torch", "tensorflow", "jax")


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


def _run_plan(plan: InstallPlan, out: Console | None) -> None:
    """Run the plan's pip command with this Python (the environment gpufly probed), as printed."""
    if plan.command is None:
        raise GpuflyError("nothing to run: no build works with this driver", hint=plan.advice, exit_code=1)
    if not plan.command.startswith("pip "):
        raise GpuflyError("this plan is not a single pip command; run its steps by hand", exit_code=1)
    args = [sys.executable, "-m", *shlex.split(plan.command)]
    if out is not None:
        out.print(f"running: {shlex.join(args)}", soft_wrap=True)
    try:
        done = subprocess.run(args, check=False)
    except OSError as exc:
        raise GpuflyError(f"could not start {sys.executable} -m pip: {exc}", exit_code=1) from exc
    if done.returncode != 0:
        raise GpuflyError(f"`{plan.command}` failed: pip exited with {done.returncode}",
                          hint="pip's messages above say why; nothing else was changed", exit_code=1)


def install(
    framework: Annotated[str, typer.Argument(help="torch, tensorflow or jax.")],
    cuda: Annotated[str | None, typer.Option("--cuda", metavar="X.Y", help="Only builds for this CUDA.")] = None,
    run: Annotated[bool, typer.Option("--run", help="Run the command (otherwise it is only printed).")] = False,
    facts_file: Annotated[Path | None, typer.Option("--facts", metavar="FILE", help="Plan for saved facts.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the exact pip command that installs FRAMEWORK with GPU support for this machine."""
    name = framework.lower()
    if name in ("pytorch",):
        name = "torch"
    if name not in FRAMEWORKS:
        raise unknown_choice("framework", framework, FRAMEWORKS)
    # The plan needs the driver, GPUs and installed packages, not whether the frameworks import: skip the imports.
    plan = _plan(name, _facts(facts_file, import_frameworks=False), cuda)
    out = None if json_out else console()
    if out is None:
        print_json({"schema_version": SCHEMA_VERSION, "framework": name, "plan": plan.to_dict()})
    else:
        if plan.command:
            out.print(plan.command, style="bold", soft_wrap=True)
        out.print(plan.reason)
        if plan.advice:
            out.print(plan.advice, soft_wrap=True)
        for warning in plan.warnings:
            out.print(f"note: {warning}")
    if run:
        _run_plan(plan, out)
