"""The report's set-up section: the doctor's verdict, every fix, and the exact PyTorch install command for this
machine, all from the doctor's own logic over one set of facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    from gpufly.doctor import Facts, Finding, InstallPlan


@dataclass(frozen=True)
class SetupSection:
    """The doctor's findings (ok, warn, fail) on this machine and the PyTorch build that fits it."""

    findings: tuple[Finding, ...]
    install: InstallPlan | None
    install_error: str | None
    frameworks_imported: bool

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "fail"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "warn"]

    @property
    def verdict(self) -> str:
        """One line: ready, or how many checks failed and warned."""
        if not self.failed and not self.warnings:
            return _("ready: all {count} checks pass").format(count=len(self.findings))
        return _("{fails} failed, {warns} warnings, of {count} checks").format(
            fails=len(self.failed), warns=len(self.warnings), count=len(self.findings))

    @property
    def note(self) -> str:
        """How the frameworks were checked: the report stays fast by using the doctor's import_frameworks=False
        path, and says so wherever it shows the verdict."""
        if self.frameworks_imported:
            return _("frameworks imported in a child process")
        return _("frameworks read from installed files; `gpufly doctor` imports them (seconds each), which also "
                 "catches an install whose import crashes")

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "note": self.note, "frameworks_imported": self.frameworks_imported,
                "findings": [f.to_dict() for f in self.findings],
                "install": self.install.to_dict() if self.install else None, "install_error": self.install_error}


def setup_section(facts: Facts, frameworks_imported: bool) -> SetupSection:
    """Diagnose ``facts`` and choose the PyTorch build for them; a chooser's refusal is kept as text, not raised,
    so the rest of the report still shows."""
    from gpufly.doctor import choose_torch, diagnose, platform_of

    try:
        plan = choose_torch(list(facts.gpus), facts.driver, platform_of(facts.env), facts.env.python_version,
                            machine=facts.env.machine)
        error = None
    except GpuflyError as refused:
        plan, error = None, str(refused)
    return SetupSection(tuple(diagnose(facts)), plan, error, frameworks_imported)
