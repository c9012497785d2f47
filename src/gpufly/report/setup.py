"""The report's set-up section: the doctor's verdict, every fix, and the exact PyTorch install command for this
machine, all from the doctor's own logic over one set of facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from gpufly.doctor import Facts, Finding, InstallPlan

FAST_PATH_NOTE = ("frameworks read from installed files; `gpufly doctor` imports them (seconds each), which also "
                  "catches an install whose import crashes")
"""The report stays fast by using the doctor's import_frameworks=False path, and says so wherever it shows the
verdict."""


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
            return f"ready: all {len(self.findings)} checks pass"
        return f"{len(self.failed)} failed, {len(self.warnings)} warnings, of {len(self.findings)} checks"

    @property
    def note(self) -> str:
        return "frameworks imported in a child process" if self.frameworks_imported else FAST_PATH_NOTE

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
