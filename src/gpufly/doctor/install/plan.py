"""What every install planner shares: the plan a user reads, the GPUs it is for, and how a machine without a
usable GPU is described."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpufly.doctor.compat import cuda_key, parse_compute_capability, parse_version
from gpufly.doctor.facts import DriverFact, EnvFact, GpuFact
from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _

GpuInput = GpuFact | str
"""A GPU as the probes saw it, or just its compute capability ("8.6")."""


@dataclass(frozen=True)
class Alternative:
    """Another command that works, and the price of taking it."""

    command: str
    why: str


@dataclass(frozen=True)
class InstallPlan:
    """What to install and why, as the user will read it."""

    framework: str
    command: str | None
    """The exact command line; None when nothing fits until the driver is updated (see ``advice``)."""
    reason: str
    variant: str | None = None
    """The build: "cu126", "cpu", "and-cuda", "cuda13"..."""
    release: str | None = None
    cuda: str | None = None
    needs_driver: str | None = None
    """The driver version to update to, when the driver is what stands in the way."""
    advice: str | None = None
    verify: str | None = None
    """A one-liner that shows the installed framework sees the GPU."""
    warnings: tuple[str, ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    rejected: tuple[str, ...] = ()
    """The builds passed over, each with why."""
    tool: str = "pip"
    """The installer the commands are written for: "pip", "uv", "pixi" or "conda"."""
    snippet: str | None = None
    """What to put in ``snippet_file`` (pyproject.toml, pixi.toml, environment.yml) for a tool that installs from a
    manifest; ``command`` then installs from it."""
    snippet_file: str | None = None

    @property
    def uses_gpu(self) -> bool:
        return self.command is not None and self.variant not in (None, "cpu")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("warnings", "alternatives", "rejected"):
            data[key] = list(data[key])
        return data


@dataclass(frozen=True)
class TargetGpu:
    """A GPU as a plan speaks of it: its name where the probes read one, and its compute capability."""

    name: str | None
    cc: str | None

    @property
    def label(self) -> str:
        if self.name is None:
            return _("a {cc} GPU").format(cc=self.cc)
        return f"{self.name} ({self.cc})" if self.cc else self.name

    def running(self, entry: str) -> str:
        """The GPU with the code it runs: "GTX 1080 Ti (6.1, sm_60)"."""
        how = _("PTX {arch}, JIT-compiled on first use").format(arch=entry) if entry.startswith("compute_") else entry
        return f"{self.name} ({self.cc}, {how})" if self.name else _("a {cc} GPU ({how})").format(cc=self.cc, how=how)


def platform_of(env: EnvFact) -> str:
    """The platform name the choosers take: WSL is Linux wheels on the Windows driver."""
    if env.in_wsl:
        return "wsl"
    return env.platform or "linux"


def target_gpus(gpus: Sequence[GpuInput]) -> tuple[TargetGpu, ...]:
    """Distinct GPUs with a printable label; two of the same card ask the same of a wheel."""
    found: list[TargetGpu] = []
    for gpu in gpus:
        entry = TargetGpu(gpu.name, gpu.compute_capability) if isinstance(gpu, GpuFact) else TargetGpu(None, str(gpu))
        if entry.cc is not None:
            parse_compute_capability(entry.cc)
        if entry not in found:
            found.append(entry)
    return tuple(found)


def labels(gpus: Sequence[TargetGpu]) -> str:
    return ", ".join(g.label for g in gpus)


def loaded_driver_version(driver: DriverFact | None) -> str | None:
    """The driver version when one is loaded and answered, else None (a CPU-only machine, as far as pip cares)."""
    if driver is None or not driver.found or not driver.version:
        return None
    parse_version(driver.version, "driver version")
    return driver.version


def no_gpu_reason(platform: str, version: str | None, gpus: Sequence[TargetGpu], driver: DriverFact | None) -> str:
    """Why a plan falls back to the CPU build before looking at any table."""
    if platform == "darwin":
        return _("there are no NVIDIA CUDA builds for macOS")
    if version is None and gpus:
        detail = f" ({driver.error})" if driver is not None and driver.error else ""
        return _("{gpus} found but no working NVIDIA driver{detail}; install the driver to use the GPU").format(
            gpus=labels(gpus), detail=detail)
    if version is None:
        return _("no NVIDIA driver found")
    return _("no NVIDIA GPU found")


def normalize_cuda(cuda: str | None) -> str | None:
    """The user's --cuda as "X.Y": "12.6", "12.6.3" or "cu126" -> "12.6"."""
    if cuda is None:
        return None
    text = cuda.strip().lower()
    if text.startswith("cu") and text[2:].isdigit() and len(text) >= 5:
        text = f"{text[2:-1]}.{text[-1]}"
    try:
        major, minor = cuda_key(text)
    except GpuflyError as exc:
        raise GpuflyError(f"cannot read --cuda {cuda!r}", hint="give a CUDA version, e.g. --cuda 12.6 (or cu126)"
                          ) from exc
    return f"{major}.{minor}"


def ignored_cuda(cuda: str | None) -> tuple[str, ...]:
    """The note for a --cuda that a CPU plan cannot honour."""
    return (_("--cuda {cuda} ignored: no CUDA build can be used here").format(cuda=cuda),) if cuda else ()
