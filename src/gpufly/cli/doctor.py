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

from gpufly.cli.render import console, print_json
from gpufly.errors import GpuflyError, unknown_choice

if TYPE_CHECKING:
    from gpufly.doctor.checks import Finding
    from gpufly.doctor.facts import Facts

SCHEMA_VERSION = 1
_STYLE = {"fail": "bold red", "warn": "yellow", "ok": "green"}


def _facts(saved: Path | None) -> Facts:
    from gpufly.doctor.facts import load_facts

    if saved is not None:
        return load_facts(saved)
    from gpufly.doctor.probes import probe_all

    return probe_all()


def render_findings(findings: list[Finding], out: Console) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_header=True, title="gpufly doctor", title_justify="left")
    table.add_column("status")
    table.add_column("finding")
    table.add_column("fix")
    for finding in findings:
        what = Text(finding.what)
        if finding.why:
            what.append("\n" + finding.why, style="dim")
        table.add_row(Text(finding.status, style=_STYLE[finding.status]), what, finding.fix)
    out.print(table)
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
        try:
            facts.save(save)
        except OSError as exc:
            raise GpuflyError(f"cannot write {save}: {exc.strerror or exc}") from exc
    findings = diagnose(facts)
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


def install(
    framework: Annotated[str, typer.Argument(help="torch, tensorflow or jax.")],
    cuda: Annotated[str | None, typer.Option("--cuda", metavar="X.Y", help="Only builds for this CUDA.")] = None,
    run: Annotated[bool, typer.Option("--run", help="Run the command (otherwise it is only printed).")] = False,
    facts_file: Annotated[Path | None, typer.Option("--facts", metavar="FILE", help="Plan for saved facts.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the exact pip command that installs FRAMEWORK with GPU support for this machine."""
    from gpufly.doctor import install as plans

    name = framework.lower()
    if name in ("pytorch",):
        name = "torch"
    if name not in FRAMEWORKS:
        raise unknown_choice("framework", framework, FRAMEWORKS)
    facts = _facts(facts_file)
    platform, python = plans.platform_of(facts.env), facts.env.python_version
    if name == "torch":
        plan = plans.choose_torch(list(facts.gpus), facts.driver, platform, python, cuda=cuda,
                                  machine=facts.env.machine)
    elif name == "tensorflow":
        plan = plans.choose_tensorflow(list(facts.gpus), facts.driver, platform, python,
                                       installed=facts.framework("tensorflow"))
    else:
        plan = plans.choose_jax(list(facts.gpus), facts.driver, platform, facts.env)
    if json_out:
        print_json({"schema_version": SCHEMA_VERSION, "framework": name, "plan": plan.to_dict()})
    else:
        out = console()
        if plan.command:
            out.print(plan.command, style="bold", soft_wrap=True)
        out.print(plan.reason)
        if plan.advice:
            out.print(plan.advice)
        for warning in plan.warnings:
            out.print(f"note: {warning}")
    if run:
        if not plan.command or not plan.command.startswith("pip "):
            raise GpuflyError("this plan is not a single pip command; run its steps by hand", exit_code=1)
        done = subprocess.run([sys.executable, "-m", *shlex.split(plan.command)], check=False)
        if done.returncode != 0:
            raise GpuflyError(f"pip exited with {done.returncode}", exit_code=1)
