"""The install command that fits this machine: the newest build its driver runs with code for every GPU.

Pure logic over facts and the compat tables. Nothing here runs pip: the CLI prints the plan, and runs
its command only when the user asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpufly.doctor.compat import (
    JaxExtra,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
    check_platform,
    cuda_key,
    driver_runs_natively,
    driver_supports,
    jax_extras,
    jax_facts,
    matching_arch,
    min_driver_for,
    parse_compute_capability,
    parse_version,
    tensorflow_facts,
    tensorflow_releases,
    toolkit_driver,
    torch_index_url,
    torch_release,
    torch_releases,
    version_at_least,
)
from gpufly.doctor.facts import DriverFact, EnvFact, FrameworkFact, GpuFact
from gpufly.errors import GpuflyError

GpuInput = GpuFact | str
"""A GPU as the probes saw it, or just its compute capability ("8.6")."""

TORCH_VERIFY = 'python -c "import torch; print(torch.cuda.is_available(), torch.cuda.get_arch_list())"'
JAX_VERIFY = 'python -c "import jax; print(jax.default_backend(), jax.devices())"'


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

    @property
    def uses_gpu(self) -> bool:
        return self.command is not None and self.variant not in (None, "cpu")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("warnings", "alternatives", "rejected"):
            data[key] = list(data[key])
        return data


@dataclass(frozen=True)
class _Gpu:
    name: str | None
    cc: str | None

    @property
    def label(self) -> str:
        if self.name is None:
            return f"a {self.cc} GPU"
        return f"{self.name} ({self.cc})" if self.cc else self.name

    def running(self, entry: str) -> str:
        """The GPU with the code it runs: "GTX 1080 Ti (6.1, sm_60)"."""
        how = f"PTX {entry}, JIT-compiled on first use" if entry.startswith("compute_") else entry
        return f"{self.name} ({self.cc}, {how})" if self.name else f"a {self.cc} GPU ({how})"


def platform_of(env: EnvFact) -> str:
    """The platform name the choosers take: WSL is Linux wheels on the Windows driver."""
    if env.in_wsl:
        return "wsl"
    return env.platform or "linux"


def _gpu_list(gpus: Sequence[GpuInput]) -> list[_Gpu]:
    """Distinct GPUs with a printable label; two of the same card ask the same of a wheel."""
    found: list[_Gpu] = []
    for gpu in gpus:
        entry = _Gpu(gpu.name, gpu.compute_capability) if isinstance(gpu, GpuFact) else _Gpu(None, str(gpu))
        if entry.cc is not None:
            parse_compute_capability(entry.cc)
        if entry not in found:
            found.append(entry)
    return found


def _labels(gpus: Sequence[_Gpu]) -> str:
    return ", ".join(g.label for g in gpus)


def _driver_version(driver: DriverFact | None) -> str | None:
    """The driver version when one is loaded and answered, else None (a CPU-only machine, as far as pip cares)."""
    if driver is None or not driver.found or not driver.version:
        return None
    parse_version(driver.version, "driver version")
    return driver.version


def _no_gpu_reason(platform: str, version: str | None, gpus: Sequence[_Gpu], driver: DriverFact | None) -> str:
    if platform == "darwin":
        return "there are no NVIDIA CUDA builds for macOS"
    if version is None and gpus:
        detail = f" ({driver.error})" if driver is not None and driver.error else ""
        return f"{_labels(gpus)} found but no working NVIDIA driver{detail}; install the driver to use the GPU"
    if version is None:
        return "no NVIDIA driver found"
    return "no NVIDIA GPU found"


# --- PyTorch ------------------------------------------------------------------------------------

def _torch_command(release: TorchRelease, variant: str, platform: str, pinned: bool = True) -> str:
    spec = f"torch=={release.release}.*" if pinned else "torch"
    if variant == "cpu" and platform in ("windows", "darwin"):
        return f"pip install {spec}"
    return f"pip install {spec} --index-url {torch_index_url(variant)}"


def _torch_candidates(release: str | None, python_version: str | None) -> list[TorchRelease]:
    """The releases to consider, newest first: the one asked for, or all with a wheel for this Python."""
    if release is not None:
        chosen = torch_release(release)
        if python_version and not chosen.supports_python(python_version):
            raise GpuflyError(f"torch {chosen.release} has no wheels for Python {python_version} "
                              f"(it supports {chosen.python_min} to {chosen.python_max})",
                              hint="choose another release, or run gpufly with another Python")
        return [chosen]
    releases = [r for r in torch_releases() if python_version is None or r.supports_python(python_version)]
    if not releases:
        known = torch_releases()
        raise GpuflyError(f"no torch release in gpufly's table has wheels for Python {python_version}",
                          hint=f"torch {known[0].release} supports Python {known[0].python_min} "
                               f"to {known[0].python_max}")
    return releases


def _normalize_cuda(cuda: str | None) -> str | None:
    """ "12.6", "12.6.3" or "cu126" -> "12.6"."""
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


def _ignored(cuda: str | None) -> tuple[str, ...]:
    return (f"--cuda {cuda} ignored: no CUDA build can be used here",) if cuda else ()


def _with_cuda(releases: list[TorchRelease], cuda: str, explicit: bool) -> list[TorchRelease]:
    kept = [r for r in releases if any(v.cuda == cuda for v in r.variants)]
    if kept:
        return kept
    if explicit:
        builds = ", ".join(f"{v.cuda} ({v.name})" for v in releases[0].variants)
        raise GpuflyError(f"torch {releases[0].release} has no CUDA {cuda} build", hint=f"its builds: {builds}")
    versions = sorted({v.cuda for r in releases for v in r.variants}, key=cuda_key)
    raise GpuflyError(f"no torch release in gpufly's table has a CUDA {cuda} build",
                      hint=f"CUDA versions with torch builds: {', '.join(versions)}")


@dataclass(frozen=True)
class _Fit:
    variant: TorchVariant
    matches: tuple[str, ...]
    """Per GPU, the entry it runs ("sm_60", "compute_120"), in GPU order."""


def _fits(release: TorchRelease, gpus: Sequence[_Gpu], platform: str, machine: str | None,
          cuda: str | None) -> tuple[list[_Fit], list[_Fit], list[str]]:
    """The builds of a release with code for every GPU, those whose list gpufly lacks, and why the rest fail."""
    covering: list[_Fit] = []
    unknown: list[_Fit] = []
    rejected: list[str] = []
    for variant in release.variants:
        if cuda is not None and variant.cuda != cuda:
            continue
        if variant.status == "built" and cuda is None:
            rejected.append(f"{variant.name}: in the build scripts but not in PyTorch's release matrix; "
                            f"ask for it with CUDA {variant.cuda}")
            continue
        arches = variant.arches(platform, machine)
        if arches is None:
            unknown.append(_Fit(variant, ()))
            rejected.append(f"{variant.name}: gpufly's table lacks its architecture list")
            continue
        found = [(g, matching_arch(g.cc, arches)) for g in gpus if g.cc]
        missing = [g for g, match in found if match is None]
        if missing:
            rejected.append(f"{variant.name}: no code for {_labels(missing)} (it ships {' '.join(arches)})")
        else:
            covering.append(_Fit(variant, tuple(match[1] for _, match in found if match)))
    return covering, unknown, rejected


def _runnable(fits: list[_Fit], version: str, platform: str, driver_cuda: str | None,
              ) -> tuple[list[_Fit], list[_Fit], list[str]]:
    """The fits this driver runs with the full feature set, those it runs by minor-version compatibility, and why
    the rest are out."""
    native: list[_Fit] = []
    compat: list[_Fit] = []
    rejected: list[str] = []
    for fit in fits:
        cuda = fit.variant.cuda
        if not driver_supports(version, cuda, platform):
            rejected.append(f"{fit.variant.name}: needs driver >= {min_driver_for(cuda, platform)}, this one is "
                            f"{version}")
        elif driver_runs_natively(version, cuda, platform, driver_cuda):
            native.append(fit)
        else:
            compat.append(fit)
    return native, compat, rejected


def _newest(fits: list[_Fit]) -> _Fit:
    return max(fits, key=lambda f: cuda_key(f.variant.cuda))


def _gpu_phrase(gpus: Sequence[_Gpu], fit: _Fit) -> str:
    if not fit.matches:
        return _labels(gpus)
    known = [g for g in gpus if g.cc]
    return ", ".join(gpu.running(entry) for gpu, entry in zip(known, fit.matches, strict=True))


def _torch_fallback(releases: list[TorchRelease], gpus: Sequence[_Gpu], version: str, platform: str,
                    machine: str | None, cuda: str | None, driver_cuda: str | None,
                    ) -> tuple[TorchRelease, _Fit, bool] | None:
    """The newest older build with code for the GPUs that this driver already runs, and whether natively."""
    for release in releases:
        covering, _, _ = _fits(release, gpus, platform, machine, cuda)
        native, compat, _ = _runnable(covering, version, platform, driver_cuda)
        if native or compat:
            return release, _newest(native or compat), bool(native)
    return None


def choose_torch(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
                 python_version: str | None = None, release: str | None = None, cuda: str | None = None,
                 machine: str | None = None) -> InstallPlan:
    """The torch wheel for this machine: among a release's CUDA builds (the newest release by default), drop
    those the driver cannot run and those without code for every GPU, and take the newest CUDA left.

    When the GPUs are too old for every build of the newest release, walk back to the newest release that
    still has code for them. ``cuda`` ("12.6" or "cu126") restricts the choice to that CUDA version.
    """
    check_platform(platform)
    wanted = _normalize_cuda(cuda)
    releases = _torch_candidates(release, python_version)
    pinned = release is not None or releases[0] != torch_releases()[0]
    visible = _gpu_list(gpus)
    version = _driver_version(driver)
    if platform == "darwin" or version is None or not visible:
        return InstallPlan("torch", _torch_command(releases[0], "cpu", platform, pinned),
                           f"{_no_gpu_reason(platform, version, visible, driver)}: the CPU build",
                           variant="cpu", release=releases[0].release, verify=TORCH_VERIFY, warnings=_ignored(cuda))
    unrestricted = None
    if wanted is not None or release is not None:
        unrestricted = _plan_torch(_torch_candidates(None, python_version), visible, version, driver, platform,
                                   machine, None, False, [], None)
    if wanted is not None:
        releases = _with_cuda(releases, wanted, explicit=release is not None)
    warnings = [f"compute capability of {g.label} unknown: gpufly could not check that the build has code for it"
                for g in visible if not g.cc]
    if platform == "windows":
        warnings.append("gpufly knows the Linux wheels' architecture lists and takes the Windows wheels to match "
                        "(without the PTX PyTorch embeds on Linux only)")
    return _plan_torch(releases, visible, version, driver, platform, machine, wanted, release is not None, warnings,
                       unrestricted)


def _plan_torch(releases: list[TorchRelease], gpus: list[_Gpu], version: str, driver: DriverFact | None,
                platform: str, machine: str | None, cuda: str | None, explicit: bool,
                warnings: list[str], unrestricted: InstallPlan | None) -> InstallPlan:
    """``unrestricted``: the plan without the user's --cuda or release, the way out named when those fail."""
    first_rejected: list[str] = []
    for position, release in enumerate(releases):
        covering, unknown, rejected = _fits(release, gpus, platform, machine, cuda)
        if position == 0:
            first_rejected = rejected
        if not covering and explicit and unknown:
            warnings.append(f"gpufly's table lacks the architecture lists of torch {release.release}: check "
                            "torch.cuda.get_arch_list() after installing")
            covering = unknown
        if covering:
            walked = None if position == 0 else releases[0].release
            return _torch_driver_choice(release, covering, gpus, version, driver, platform, machine, cuda,
                                        walked, warnings, first_rejected, releases[position + 1:], unrestricted)
    _raise_if_constrained(releases, gpus, explicit, cuda, unrestricted)
    return InstallPlan("torch", _torch_command(releases[0], "cpu", platform, pinned=False),
                       f"no torch build in gpufly's table has code for {_labels(gpus)}: the CPU build",
                       variant="cpu", release=releases[0].release, verify=TORCH_VERIFY, warnings=tuple(warnings),
                       rejected=tuple(first_rejected))


def _raise_if_constrained(releases: list[TorchRelease], gpus: list[_Gpu], explicit: bool, cuda: str | None,
                          unrestricted: InstallPlan | None) -> None:
    """A release or CUDA the user asked for that has no code for their GPUs is their mistake to fix; the hint
    names what gpufly would pick without the constraint, which also has to run on this driver."""
    if not explicit and cuda is None:
        return
    asked = " and ".join(part for part in (
        f"torch {releases[0].release}" if explicit else "", f"CUDA {cuda}" if cuda else "") if part)
    raise GpuflyError(f"no build of {asked} has code for {_labels(gpus)}", hint=_way_out(unrestricted))


def _way_out(unrestricted: InstallPlan | None) -> str:
    """The unrestricted plan in a hint: the build that runs here today, else the driver it needs."""
    if unrestricted is None or unrestricted.variant in (None, "cpu"):
        return "no torch build in gpufly's table has code for them"
    if unrestricted.uses_gpu:
        return (f"torch {unrestricted.release} {unrestricted.variant} has code for them and runs on this driver: "
                f"{unrestricted.command}")
    return (f"torch {unrestricted.release} {unrestricted.variant} has code for them after a driver update to "
            f"{unrestricted.needs_driver} or newer")


def _torch_driver_choice(release: TorchRelease, covering: list[_Fit], gpus: list[_Gpu], version: str,
                         driver: DriverFact | None, platform: str, machine: str | None, cuda: str | None,
                         walked: str | None, warnings: list[str], rejected: list[str],
                         older: list[TorchRelease], unrestricted: InstallPlan | None) -> InstallPlan:
    driver_cuda = driver.cuda_version if driver is not None else None
    native, compat, too_new = _runnable(covering, version, platform, driver_cuda)
    rejected = [*rejected, *too_new]
    prefix = "" if walked is None else f"torch {walked} has no build with code for {_labels(gpus)}; "
    asked = f" (CUDA {cuda}, as asked)" if cuda else ""
    if not native and not compat:
        return _driver_too_old(release, covering, gpus, version, platform, machine, cuda, driver_cuda, prefix,
                               warnings, rejected, older, unrestricted)
    fit = _newest(native or compat)
    variant = fit.variant
    mode = "natively"
    if not native:
        mode = "through minor-version compatibility"
        shipped = toolkit_driver(variant.cuda, platform)
        full = "" if shipped is None else f"; a driver >= {shipped} runs it natively"
        warnings.append(f"driver {version} runs CUDA {variant.cuda} only through minor-version compatibility: "
                        f"limited feature set, PTX JIT may fail{full}")
    if native and compat and cuda_key(_newest(compat).variant.cuda) > cuda_key(variant.cuda):
        rejected.append(f"{_newest(compat).variant.name}: driver {version} runs it only through minor-version "
                        f"compatibility; {variant.name} runs natively")
    if variant.status == "experimental":
        warnings.append(f"{variant.name} is marked experimental for torch {release.release} in PyTorch's release "
                        "matrix")
    reason = (f"{prefix}torch {release.release} {variant.name}{asked}: the newest build with code for "
              f"{_gpu_phrase(gpus, fit)} that driver {version} runs {mode}")
    return InstallPlan("torch", _torch_command(release, variant.name, platform), reason, variant=variant.name,
                       release=release.release, cuda=variant.cuda, verify=TORCH_VERIFY, warnings=tuple(warnings),
                       rejected=tuple(rejected))


def _cheapest(fits: list[_Fit], platform: str) -> _Fit:
    """The fit the oldest driver runs; among builds with the same floor (one CUDA family), the newest CUDA."""
    return min(fits, key=lambda f: (parse_version(min_driver_for(f.variant.cuda, platform)),
                                    tuple(-part for part in cuda_key(f.variant.cuda))))


def _driver_too_old(release: TorchRelease, covering: list[_Fit], gpus: list[_Gpu], version: str, platform: str,
                    machine: str | None, cuda: str | None, driver_cuda: str | None, prefix: str,
                    warnings: list[str], rejected: list[str], older: list[TorchRelease],
                    unrestricted: InstallPlan | None = None) -> InstallPlan:
    """No build of the release runs on this driver: name the lowest driver that runs one of its builds with code
    for the GPUs (the newest build's driver as a note), and meanwhile install the newest older torch the present
    driver runs, so the GPU works today (no command if there is none). Where --cuda is what rules out every
    build, say so, and offer the build gpufly picks without it."""
    target = _cheapest(covering, platform).variant
    need = min_driver_for(target.cuda, platform)
    after = _torch_command(release, target.name, platform)
    later = [Alternative(after, f"after updating the driver to {need} or newer: torch {release.release} "
                                f"{target.name}")]
    newest = _newest(covering).variant
    newest_need = min_driver_for(newest.cuda, platform)
    if parse_version(newest_need) > parse_version(need):
        warnings.append(f"a driver >= {newest_need} runs torch {release.release} {newest.name}, its newest build "
                        f"with code for {_labels(gpus)}")
        later.append(Alternative(_torch_command(release, newest.name, platform),
                                 f"after updating the driver to {newest_need} or newer: torch {release.release} "
                                 f"{newest.name}, the newest build"))
    advice = f"update the NVIDIA driver to at least {need}, then run: {after}"
    asked = f" (CUDA {cuda}, as asked)" if cuda else ""
    reason = (f"{prefix}driver {version} is too old for every torch {release.release} build{asked} with code for "
              f"{_labels(gpus)}; update the NVIDIA driver to at least {need}")
    if cuda and unrestricted is not None and unrestricted.uses_gpu:
        assert unrestricted.command is not None
        later.append(Alternative(unrestricted.command, f"without --cuda {cuda}: torch {unrestricted.release} "
                                                       f"{unrestricted.variant}, which driver {version} runs"))
        reason += f", or drop --cuda: torch {unrestricted.release} {unrestricted.variant} runs on this driver"
        advice += f"; or, without --cuda {cuda}, run: {unrestricted.command}"
    fallback = _torch_fallback(older, gpus, version, platform, machine, cuda, driver_cuda)
    if fallback is None:
        return InstallPlan("torch", None, reason, variant=target.name, release=release.release, cuda=target.cuda,
                           needs_driver=need, advice=advice, verify=TORCH_VERIFY, warnings=tuple(warnings),
                           alternatives=tuple(later[1:]), rejected=tuple(rejected))
    old_release, fit, native = fallback
    if not native:
        warnings.append(f"driver {version} runs CUDA {fit.variant.cuda} only through minor-version compatibility: "
                        "limited feature set, PTX JIT may fail")
    return InstallPlan("torch", _torch_command(old_release, fit.variant.name, platform),
                       f"{reason}, or keep it with torch {old_release.release} {fit.variant.name} "
                       f"({_gpu_phrase(gpus, fit)})",
                       variant=fit.variant.name, release=old_release.release, cuda=fit.variant.cuda,
                       needs_driver=need, advice=advice, verify=TORCH_VERIFY, warnings=tuple(warnings),
                       alternatives=tuple(later), rejected=tuple(rejected))


# --- TensorFlow ---------------------------------------------------------------------------------

def _tensorflow_cudas(releases: Sequence[TensorflowRelease]) -> str:
    """ "12.5 (TensorFlow 2.18 to 2.21), 12.3 (2.16 to 2.17), ..." for a hint."""
    spans: dict[str, list[str]] = {}
    for release in releases:
        spans.setdefault(release.cuda, []).append(release.release)
    parts = [f"{cuda} ({names[-1]} to {names[0]})" if len(names) > 1 else f"{cuda} ({names[0]})"
             for cuda, names in spans.items()]
    return "TensorFlow's CUDA versions: " + ", ".join(parts)


def _tensorflow_release(python_version: str | None, cuda: str | None = None) -> TensorflowRelease:
    """The newest release with wheels for this Python, among those built with ``cuda`` when one is asked for."""
    releases = tensorflow_releases()
    if cuda is not None:
        releases = tuple(r for r in releases if cuda_key(r.cuda) == cuda_key(cuda))
        if not releases:
            raise GpuflyError(f"no TensorFlow release in gpufly's table is built with CUDA {cuda}",
                              hint=_tensorflow_cudas(tensorflow_releases()))
    if python_version is None:
        return releases[0]
    for release in releases:
        if release.supports_python(python_version):
            return release
    built = f" built with CUDA {cuda}" if cuda else ""
    raise GpuflyError(f"no TensorFlow release{built} in gpufly's table has wheels for Python {python_version}",
                      hint=f"TensorFlow {releases[0].release} supports Python {releases[0].python_min} "
                           f"to {releases[0].python_max}")


def _tensorflow_warnings(installed: FrameworkFact | None) -> list[str]:
    facts = tensorflow_facts()
    check = facts["gpu_check"]
    warnings = [f"check the GPU with {check['use']}; {check['deprecated']} is deprecated"]
    distribution = (installed.distribution or "").replace("_", "-").lower() if installed else ""
    for row in facts["removed_packages"]:
        if distribution == row["package"]:
            warnings.append(f"{row['package']} is installed: it is removed from PyPI ({row['note']}); "
                            f"run pip uninstall -y {row['package']} first")
    return warnings


def _tf_spec(release: TensorflowRelease, extra: str | None) -> str:
    name = f"tensorflow[{extra}]" if extra else "tensorflow"
    pin = "" if release == tensorflow_releases()[0] else f"=={release.release}.*"
    return f"'{name}{pin}'" if extra or pin else name


def choose_tensorflow(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
                      python_version: str | None = None, installed: FrameworkFact | None = None,
                      cuda: str | None = None) -> InstallPlan:
    """TensorFlow with its CUDA from pip (``tensorflow[and-cuda]``) where the driver runs it, else the CPU build.

    Each release is built with one CUDA; ``cuda`` picks the newest release built with it (an error when
    none is). Never ``tensorflow-gpu``: that package is removed and only raises an error.
    """
    check_platform(platform)
    wanted = _normalize_cuda(cuda)
    facts = tensorflow_facts()
    warnings = _tensorflow_warnings(installed)
    verify = facts["gpu_check"]["verify"]
    visible = _gpu_list(gpus)
    version = _driver_version(driver)
    if platform in ("windows", "darwin") or version is None or not visible:
        release = _tensorflow_release(python_version)
        cpu = f"pip install {_tf_spec(release, None)}"
        warnings += _ignored(cuda)
        if platform == "windows":
            return _tensorflow_windows(release, cpu, verify, warnings)
        return InstallPlan("tensorflow", cpu, f"{_no_gpu_reason(platform, version, visible, driver)}: the CPU build",
                           variant="cpu", release=release.release, verify=verify, warnings=tuple(warnings))
    release = _tensorflow_release(python_version, wanted)
    asked = ", as asked" if wanted else ""
    if driver_supports(version, release.cuda, platform):
        return _tensorflow_gpu(release, version, asked, verify, warnings)
    return _tensorflow_driver_too_old(release, version, platform, python_version, verify, warnings)


def _tensorflow_gpu(release: TensorflowRelease, version: str, asked: str, verify: str,
                    warnings: list[str]) -> InstallPlan:
    if not release.and_cuda:
        since = tensorflow_facts()["and_cuda"]["since"]
        warnings.append(f"TensorFlow {release.release} does not bring CUDA with it (the and-cuda extra starts with "
                        f"{since}): install CUDA {release.cuda} and cuDNN {release.cudnn} yourself")
        reason = (f"TensorFlow {release.release} is tested with CUDA {release.cuda}{asked}, and cuDNN "
                  f"{release.cudnn}; driver {version} runs it")
        return InstallPlan("tensorflow", f"pip install {_tf_spec(release, None)}", reason, variant="system-cuda",
                           release=release.release, cuda=release.cuda, verify=verify, warnings=tuple(warnings))
    reason = (f"driver {version} runs CUDA {release.cuda}{asked}, which TensorFlow {release.release} is tested with "
              f"(cuDNN {release.cudnn}); the and-cuda extra installs both from pip")
    return InstallPlan("tensorflow", f"pip install {_tf_spec(release, 'and-cuda')}", reason, variant="and-cuda",
                       release=release.release, cuda=release.cuda, verify=verify, warnings=tuple(warnings))


def _tensorflow_driver_too_old(release: TensorflowRelease, version: str, platform: str, python_version: str | None,
                               verify: str, warnings: list[str]) -> InstallPlan:
    cpu = f"pip install {_tf_spec(release, None)}"
    need = min_driver_for(release.cuda, platform)
    alternatives = []
    for older in tensorflow_releases():
        usable = python_version is None or older.supports_python(python_version)
        if older.and_cuda and usable and driver_supports(version, older.cuda, platform):
            alternatives.append(Alternative(f"pip install {_tf_spec(older, 'and-cuda')}",
                                            f"keeps driver {version}: TensorFlow {older.release} uses CUDA "
                                            f"{older.cuda}"))
            break
    reason = (f"driver {version} is too old for CUDA {release.cuda} of TensorFlow {release.release} (needs >= "
              f"{need}): the CPU build until the driver is updated")
    return InstallPlan("tensorflow", cpu, reason, variant="cpu", release=release.release, cuda=release.cuda,
                       needs_driver=need,
                       advice=f"update the NVIDIA driver to at least {need}, then run: "
                              f"pip install {_tf_spec(release, 'and-cuda')}",
                       verify=verify, warnings=tuple(warnings), alternatives=tuple(alternatives))


def _tensorflow_windows(release: TensorflowRelease, cpu: str, verify: str, warnings: list[str]) -> InstallPlan:
    native = tensorflow_facts()["native_windows_gpu"]
    reason = (f"TensorFlow {native['last_release']} was the last release with GPU support on native Windows; "
              f"newer ones use the GPU only under WSL2 (Windows 10 build {native['wsl_min_windows_build']} or later)")
    alternatives = (
        Alternative("pip install 'tensorflow[and-cuda]'", "inside WSL2: the GPU build of the current release"),
        Alternative(" && ".join(native["legacy_recipe"]),
                    f"native Windows GPU with TensorFlow {native['last_release']} and conda's CUDA 11.2 / cuDNN 8.1"),
    )
    return InstallPlan("tensorflow", cpu, f"{reason}: the CPU build here", variant="cpu", release=release.release,
                       verify=verify, warnings=tuple(warnings), alternatives=alternatives)


# --- JAX ----------------------------------------------------------------------------------------

def _jax_extras(cuda: str | None) -> tuple[JaxExtra, ...]:
    """JAX's CUDA extras, newest first; with ``cuda``, the one for its major version (jax[cuda12] for 12.x)."""
    extras = jax_extras()
    if cuda is None:
        return extras
    kept = tuple(e for e in extras if cuda_key(e.cuda)[0] == cuda_key(cuda)[0])
    if not kept:
        known = ", ".join(f"jax[{e.extra}] (CUDA {cuda_key(e.cuda)[0]}.x)" for e in extras)
        raise GpuflyError(f"JAX has no wheels for CUDA {cuda}", hint=f"its CUDA extras: {known}")
    return kept


def choose_jax(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
               env: EnvFact | None = None, cuda: str | None = None) -> InstallPlan:
    """``jax[cuda13]`` when the driver and every GPU allow it, else ``jax[cuda12]``, else the CPU build.

    ``cuda`` ("12.6", "13") keeps the extra for that CUDA major version.
    """
    check_platform(platform)
    wanted = _normalize_cuda(cuda)
    facts = jax_facts()
    cpu = facts["cpu_command"]
    support = facts["gpu_platforms"][platform]
    warnings = [row["text"] for row in facts["warnings"] if row["when"] == "ld_library_path" and env is not None
                and env.ld_library_path]
    visible = _gpu_list(gpus)
    version = _driver_version(driver)
    if support == "unsupported":
        where = "native Windows (use WSL2, where they are experimental)" if platform == "windows" else "macOS"
        return InstallPlan("jax", cpu, f"JAX has no NVIDIA GPU wheels for {where}: the CPU build", variant="cpu",
                           verify=JAX_VERIFY, warnings=(*warnings, *_ignored(cuda)))
    if version is None or not visible:
        return InstallPlan("jax", cpu, f"{_no_gpu_reason(platform, version, visible, driver)}: the CPU build",
                           variant="cpu", verify=JAX_VERIFY, warnings=(*warnings, *_ignored(cuda)))
    extras = _jax_extras(wanted)
    if support == "experimental":
        warnings.append(f"JAX's GPU wheels are experimental on {platform.upper()}")
    return _plan_jax(extras, visible, version, wanted, cpu, warnings)


def _plan_jax(extras: Sequence[JaxExtra], visible: list[_Gpu], version: str, wanted: str | None, cpu: str,
              warnings: list[str]) -> InstallPlan:
    known = [g for g in visible if g.cc]
    asked = f" (CUDA {cuda_key(wanted)[0]}.x, as asked)" if wanted else ""
    rejected = []
    drivers: list[JaxExtra] = []
    for extra in extras:
        old = [g for g in known if parse_compute_capability(g.cc or "0.0")
               < parse_compute_capability(extra.min_compute_capability)]
        if old:
            rejected.append(f"{extra.extra}: needs compute capability >= {extra.min_compute_capability}, "
                            f"{_labels(old)} is older")
            continue
        if not version_at_least(version, extra.min_driver_linux):
            rejected.append(f"{extra.extra}: needs driver >= {extra.min_driver_linux}, this one is {version}")
            drivers.append(extra)
            continue
        reason = (f"driver {version} and {_labels(visible)} meet jax[{extra.extra}]{asked} (driver >= "
                  f"{extra.min_driver_linux}, compute capability >= {extra.min_compute_capability})")
        return InstallPlan("jax", extra.command, reason, variant=extra.extra, cuda=extra.cuda, verify=JAX_VERIFY,
                           warnings=tuple(warnings), rejected=tuple(rejected))
    if drivers:
        lowest = min(drivers, key=lambda extra: parse_version(extra.min_driver_linux))
        needs_driver = lowest.min_driver_linux
        warnings += [f"a driver >= {e.min_driver_linux} runs jax[{e.extra}]" for e in drivers if e != lowest]
        return InstallPlan("jax", cpu, f"driver {version} is too old for JAX's CUDA wheels{asked}: the CPU build "
                           f"until the NVIDIA driver is updated to at least {needs_driver} (jax[{lowest.extra}])",
                           variant="cpu", needs_driver=needs_driver,
                           advice=f"update the NVIDIA driver to at least {needs_driver}, then run: {lowest.command}",
                           verify=JAX_VERIFY, warnings=tuple(warnings), rejected=tuple(rejected))
    return InstallPlan("jax", cpu, f"{_labels(visible)} is older than any JAX CUDA wheel{asked} supports: the CPU "
                       "build", variant="cpu", verify=JAX_VERIFY, warnings=tuple(warnings), rejected=tuple(rejected))
