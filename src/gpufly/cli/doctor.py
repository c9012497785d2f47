"""`gpufly doctor`: diagnose the GPU software stack (the install command is `gpufly install`, cli/install.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpufly.cli.render import LANG_HELP, choose_language, console, print_json, print_note
from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.doctor.checks import Finding
    from gpufly.doctor.facts import Facts

SCHEMA_VERSION = 1
_STYLE = {"fail": "bold red", "warn": "yellow", "ok": "green"}


def _facts(saved: Path | None, import_frameworks: bool = True, import_timeout: float | None = None) -> Facts:
    from gpufly.doctor.facts import load_facts

    if saved is not None:
        return load_facts(saved)
    from gpufly.doctor.probes import ImportLimits, probe_all

    limits = ImportLimits() if import_timeout is None else ImportLimits().with_cap(import_timeout)
    return probe_all(import_frameworks=import_frameworks, import_limits=limits)


def render_facts(facts: Facts, out: Console) -> None:
    """The facts a bug report needs, one labelled line each (the whole set is in --json and --save)."""
    from gpufly.doctor.facts import summary_lines

    lines = summary_lines(facts)
    if not lines:
        return
    width = max(cell_len(label) for label, _text in lines)
    out.print(_("machine:"))
    for label, text in lines:
        out.print(f"  {label}{' ' * (width - cell_len(label))}  {text}", soft_wrap=True, highlight=False)


def _status(status: str) -> str:
    """A finding's status as the reader says it (the JSON keeps ok, warn, fail)."""
    return {"ok": _("ok"), "warn": _("warn"), "fail": _("fail")}[status]


def render_findings(findings: list[Finding], out: Console) -> None:
    """The findings as a numbered table, then each fix on a line of its own below it.

    A fix is often a command; inside a table cell it would be cut or broken across lines at any
    usual terminal width, so it is printed whole (soft-wrapped: the terminal folds it, a copy gets
    one line).
    """
    table = Table(box=box.SIMPLE_HEAD, show_header=True, title="gpufly doctor", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column(_("status"), no_wrap=True)
    table.add_column(_("finding"), overflow="fold")
    for number, finding in enumerate(findings, start=1):
        what = Text(finding.what)
        if finding.why:
            what.append("\n" + finding.why, style="dim")
        table.add_row(str(number), Text(_status(finding.status), style=_STYLE[finding.status]), what)
    out.print(table)
    fixes = [(number, finding.fix) for number, finding in enumerate(findings, start=1) if finding.fix]
    if fixes:
        out.print(_("fixes:"))
        for number, fix in fixes:
            out.print(f"  {number}. {fix}", soft_wrap=True)
    fails = sum(f.status == "fail" for f in findings)
    warns = sum(f.status == "warn" for f in findings)
    out.print(_("{fails} failed, {warns} warnings, {ok} ok").format(fails=fails, warns=warns,
                                                                     ok=len(findings) - fails - warns))


def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    deep: Annotated[bool, typer.Option("--deep", help="Also run a matmul smoke test on each GPU.")] = False,
    save: Annotated[Path | None, typer.Option("--save", metavar="FILE", help="Write the facts to FILE.")] = None,
    facts_file: Annotated[Path | None, typer.Option("--facts", metavar="FILE",
                                                    help="Diagnose saved facts instead of this machine.")] = None,
    import_timeout: Annotated[float | None, typer.Option(
        "--import-timeout", metavar="SECONDS",
        help="Most seconds each framework import may take (default 180: 20, then more while it makes progress)."),
    ] = None,
    lang: Annotated[str | None, typer.Option("--lang", metavar="LANG", help=LANG_HELP)] = None,
) -> None:
    """Find what does not fit together in the driver, CUDA and framework stack, and how to fix it.

    Examples:
      gpufly doctor
      gpufly doctor --deep --lang zh
      gpufly doctor --save facts.json
      gpufly doctor --facts facts.json --json
    """
    from gpufly.doctor.checks import diagnose, smoke_findings

    choose_language(lang, json_out)
    facts = _facts(facts_file, import_timeout=import_timeout)
    if save is not None:
        facts.save(save)
    findings = diagnose(facts)
    if deep and facts_file is not None:
        print_note(_("--deep skipped: the smoke test runs on this machine's GPUs, not on saved facts"))
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
        render_facts(facts, out)
        if save is not None:
            out.print(_("facts written to {path}: send them with a bug report, or replay with --facts").format(
                path=save))
    if failed:
        raise typer.Exit(1)
