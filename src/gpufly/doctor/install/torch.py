"""The torch wheel for this machine: the newest CUDA build its driver runs that has code for every GPU.

A release's CUDA builds are filtered twice: by the architectures each wheel ships (``_fits``), then by what the
driver runs (``_runnable``). When the newest release has nothing for the GPUs, the planner walks back through
older releases; when the driver is too old for every fitting build, it names the driver update and meanwhile
offers the newest older build the present driver runs (``_driver_too_old``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufly.doctor.compat import (
    TorchRelease,
    TorchVariant,
    check_platform,
    cuda_key,
    driver_runs_natively,
    driver_supports,
    matching_arch,
    min_driver_for,
    parse_version,
    toolkit_driver,
    torch_index_url,
    torch_release,
    torch_releases,
)
from gpufly.doctor.facts import DriverFact
from gpufly.doctor.install.plan import (
    Alternative,
    GpuInput,
    InstallPlan,
    TargetGpu,
    ignored_cuda,
    labels,
    loaded_driver_version,
    no_gpu_reason,
    normalize_cuda,
    target_gpus,
)
from gpufly.errors import GpuflyError

TORCH_VERIFY = 'python -c "import torch; print(torch.cuda.is_available(), torch.cuda.get_arch_list())"'


@dataclass(frozen=True)
class _TorchQuery:
    """The machine and the user's constraints, asked of every release and build the planner looks at."""

    gpus: tuple[TargetGpu, ...]
    version: str
    """The driver version."""
    driver_cuda: str | None
    """The CUDA version the driver reports, the best evidence of what it runs natively."""
    platform: str
    machine: str | None
    cuda: str | None = None
    """The CUDA version the user asked for ("12.6"), if any."""
    explicit: bool = False
    """Whether the user asked for a release."""
    unrestricted: InstallPlan | None = None
    """The plan without the user's --cuda or release: the way out named when those fail."""


@dataclass(frozen=True)
class _Fit:
    """A build with code for every GPU."""

    variant: TorchVariant
    matches: tuple[str, ...]
    """Per GPU, the entry it runs ("sm_60", "compute_120"), in GPU order."""


@dataclass(frozen=True)
class _Candidate:
    """The release the walk stopped at, its builds with code for the GPUs, and the releases older than it."""

    release: TorchRelease
    covering: tuple[_Fit, ...]
    walked_from: str | None
    """The newer release first asked about, when it had no build for the GPUs."""
    older: tuple[TorchRelease, ...]


def choose_torch(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
                 python_version: str | None = None, release: str | None = None, cuda: str | None = None,
                 machine: str | None = None) -> InstallPlan:
    """The torch wheel for this machine: among a release's CUDA builds (the newest release by default), drop
    those the driver cannot run and those without code for every GPU, and take the newest CUDA left.

    When the GPUs are too old for every build of the newest release, walk back to the newest release that
    still has code for them. ``cuda`` ("12.6" or "cu126") restricts the choice to that CUDA version.
    """
    check_platform(platform)
    wanted = normalize_cuda(cuda)
    releases = _torch_candidates(release, python_version)
    pinned = release is not None or releases[0] != torch_releases()[0]
    visible = target_gpus(gpus)
    version = loaded_driver_version(driver)
    if platform == "darwin" or version is None or not visible:
        return InstallPlan("torch", _torch_command(releases[0], "cpu", platform, pinned),
                           f"{no_gpu_reason(platform, version, visible, driver)}: the CPU build",
                           variant="cpu", release=releases[0].release, verify=TORCH_VERIFY,
                           warnings=ignored_cuda(cuda))
    query = _TorchQuery(visible, version, driver.cuda_version if driver is not None else None, platform, machine)
    if wanted is not None or release is not None:
        unrestricted = _plan_torch(query, _torch_candidates(None, python_version), ())
        query = replace(query, cuda=wanted, explicit=release is not None, unrestricted=unrestricted)
    if wanted is not None:
        releases = _with_cuda(releases, wanted, explicit=release is not None)
    return _plan_torch(query, releases, _torch_warnings(visible, platform))


def _torch_warnings(gpus: Sequence[TargetGpu], platform: str) -> tuple[str, ...]:
    """What a torch plan cannot check here, said up front."""
    unknown = [f"compute capability of {g.label} unknown: gpufly could not check that the build has code for it"
               for g in gpus if not g.cc]
    if platform == "windows":
        unknown.append("gpufly knows the Linux wheels' architecture lists and takes the Windows wheels to match "
                       "(without the PTX PyTorch embeds on Linux only)")
    return tuple(unknown)


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


def _fits(release: TorchRelease, query: _TorchQuery) -> tuple[list[_Fit], list[_Fit], list[str]]:
    """The builds of a release with code for every GPU, those whose list gpufly lacks, and why the rest fail."""
    covering: list[_Fit] = []
    unknown: list[_Fit] = []
    rejected: list[str] = []
    for variant in release.variants:
        if query.cuda is not None and variant.cuda != query.cuda:
            continue
        if variant.status == "built" and query.cuda is None:
            rejected.append(f"{variant.name}: in the build scripts but not in PyTorch's release matrix; "
                            f"ask for it with CUDA {variant.cuda}")
            continue
        arches = variant.arches(query.platform, query.machine)
        if arches is None:
            unknown.append(_Fit(variant, ()))
            rejected.append(f"{variant.name}: gpufly's table lacks its architecture list")
            continue
        found = [(g, matching_arch(g.cc, arches)) for g in query.gpus if g.cc]
        missing = [g for g, match in found if match is None]
        if missing:
            rejected.append(f"{variant.name}: no code for {labels(missing)} (it ships {' '.join(arches)})")
        else:
            covering.append(_Fit(variant, tuple(match[1] for _, match in found if match)))
    return covering, unknown, rejected


def _runnable(fits: Sequence[_Fit], query: _TorchQuery) -> tuple[list[_Fit], list[_Fit], list[str]]:
    """The fits this driver runs with the full feature set, those it runs by minor-version compatibility, and why
    the rest are out."""
    native: list[_Fit] = []
    compat: list[_Fit] = []
    rejected: list[str] = []
    for fit in fits:
        cuda = fit.variant.cuda
        if not driver_supports(query.version, cuda, query.platform):
            rejected.append(f"{fit.variant.name}: needs driver >= {min_driver_for(cuda, query.platform)}, this one "
                            f"is {query.version}")
        elif driver_runs_natively(query.version, cuda, query.platform, query.driver_cuda):
            native.append(fit)
        else:
            compat.append(fit)
    return native, compat, rejected


def _newest(fits: Sequence[_Fit]) -> _Fit:
    return max(fits, key=lambda f: cuda_key(f.variant.cuda))


def _gpu_phrase(gpus: Sequence[TargetGpu], fit: _Fit) -> str:
    if not fit.matches:
        return labels(gpus)
    known = [g for g in gpus if g.cc]
    return ", ".join(gpu.running(entry) for gpu, entry in zip(known, fit.matches, strict=True))


def _plan_torch(query: _TorchQuery, releases: Sequence[TorchRelease], warnings: tuple[str, ...]) -> InstallPlan:
    """Walk the releases, newest first, to the first with a build that has code for every GPU; then let the
    driver choose among its builds. The CPU build when no release has code for the GPUs."""
    first_rejected: list[str] = []
    for position, release in enumerate(releases):
        covering, unknown, rejected = _fits(release, query)
        if position == 0:
            first_rejected = rejected
        if not covering and query.explicit and unknown:
            warnings = (*warnings, f"gpufly's table lacks the architecture lists of torch {release.release}: check "
                        "torch.cuda.get_arch_list() after installing")
            covering = unknown
        if covering:
            walked = None if position == 0 else releases[0].release
            candidate = _Candidate(release, tuple(covering), walked, tuple(releases[position + 1:]))
            return _torch_driver_choice(query, candidate, warnings, tuple(first_rejected))
    _raise_if_constrained(query, releases)
    return InstallPlan("torch", _torch_command(releases[0], "cpu", query.platform, pinned=False),
                       f"no torch build in gpufly's table has code for {labels(query.gpus)}: the CPU build",
                       variant="cpu", release=releases[0].release, verify=TORCH_VERIFY, warnings=warnings,
                       rejected=tuple(first_rejected))


def _raise_if_constrained(query: _TorchQuery, releases: Sequence[TorchRelease]) -> None:
    """A release or CUDA the user asked for that has no code for their GPUs is their mistake to fix; the hint
    names what gpufly would pick without the constraint, which also has to run on this driver."""
    if not query.explicit and query.cuda is None:
        return
    asked = " and ".join(part for part in (
        f"torch {releases[0].release}" if query.explicit else "", f"CUDA {query.cuda}" if query.cuda else "") if part)
    raise GpuflyError(f"no build of {asked} has code for {labels(query.gpus)}", hint=_way_out(query.unrestricted))


def _way_out(unrestricted: InstallPlan | None) -> str:
    """The unrestricted plan in a hint: the build that runs here today, else the driver it needs."""
    if unrestricted is None or unrestricted.variant in (None, "cpu"):
        return "no torch build in gpufly's table has code for them"
    if unrestricted.uses_gpu:
        return (f"torch {unrestricted.release} {unrestricted.variant} has code for them and runs on this driver: "
                f"{unrestricted.command}")
    return (f"torch {unrestricted.release} {unrestricted.variant} has code for them after a driver update to "
            f"{unrestricted.needs_driver} or newer")


def _walk_prefix(query: _TorchQuery, candidate: _Candidate) -> str:
    """How the reason starts when the newest release had nothing for the GPUs."""
    if candidate.walked_from is None:
        return ""
    return f"torch {candidate.walked_from} has no build with code for {labels(query.gpus)}; "


def _torch_driver_choice(query: _TorchQuery, candidate: _Candidate, warnings: tuple[str, ...],
                         rejected: tuple[str, ...]) -> InstallPlan:
    """The newest of the candidate's builds the driver runs, natively before by minor-version compatibility."""
    native, compat, too_new = _runnable(candidate.covering, query)
    rejected = (*rejected, *too_new)
    if not native and not compat:
        return _driver_too_old(query, candidate, warnings, rejected)
    release, fit = candidate.release, _newest(native or compat)
    variant = fit.variant
    notes = list(warnings)
    mode = "natively"
    if not native:
        mode = "through minor-version compatibility"
        shipped = toolkit_driver(variant.cuda, query.platform)
        full = "" if shipped is None else f"; a driver >= {shipped} runs it natively"
        notes.append(f"driver {query.version} runs CUDA {variant.cuda} only through minor-version compatibility: "
                     f"limited feature set, PTX JIT may fail{full}")
    if native and compat and cuda_key(_newest(compat).variant.cuda) > cuda_key(variant.cuda):
        rejected = (*rejected, f"{_newest(compat).variant.name}: driver {query.version} runs it only through "
                               f"minor-version compatibility; {variant.name} runs natively")
    if variant.status == "experimental":
        notes.append(f"{variant.name} is marked experimental for torch {release.release} in PyTorch's release "
                     "matrix")
    asked = f" (CUDA {query.cuda}, as asked)" if query.cuda else ""
    reason = (f"{_walk_prefix(query, candidate)}torch {release.release} {variant.name}{asked}: the newest build "
              f"with code for {_gpu_phrase(query.gpus, fit)} that driver {query.version} runs {mode}")
    return InstallPlan("torch", _torch_command(release, variant.name, query.platform), reason, variant=variant.name,
                       release=release.release, cuda=variant.cuda, verify=TORCH_VERIFY, warnings=tuple(notes),
                       rejected=rejected)


def _cheapest(fits: Sequence[_Fit], platform: str) -> _Fit:
    """The fit the oldest driver runs; among builds with the same floor (one CUDA family), the newest CUDA."""
    return min(fits, key=lambda f: (parse_version(min_driver_for(f.variant.cuda, platform)),
                                    tuple(-part for part in cuda_key(f.variant.cuda))))


def _torch_fallback(query: _TorchQuery, releases: Sequence[TorchRelease]) -> tuple[TorchRelease, _Fit, bool] | None:
    """The newest older build with code for the GPUs that this driver already runs, and whether natively."""
    for release in releases:
        covering, _, _ = _fits(release, query)
        native, compat, _ = _runnable(covering, query)
        if native or compat:
            return release, _newest(native or compat), bool(native)
    return None


def _driver_too_old(query: _TorchQuery, candidate: _Candidate, warnings: tuple[str, ...],
                    rejected: tuple[str, ...]) -> InstallPlan:
    """No build of the release runs on this driver: name the lowest driver that runs one of its builds with code
    for the GPUs (the newest build's driver as a note), and meanwhile install the newest older torch the present
    driver runs, so the GPU works today (no command if there is none). Where --cuda is what rules out every
    build, say so, and offer the build gpufly picks without it."""
    release, platform, version, cuda = candidate.release, query.platform, query.version, query.cuda
    target = _cheapest(candidate.covering, platform).variant
    need = min_driver_for(target.cuda, platform)
    after = _torch_command(release, target.name, platform)
    notes = list(warnings)
    later = [Alternative(after, f"after updating the driver to {need} or newer: torch {release.release} "
                                f"{target.name}")]
    newest = _newest(candidate.covering).variant
    newest_need = min_driver_for(newest.cuda, platform)
    if parse_version(newest_need) > parse_version(need):
        notes.append(f"a driver >= {newest_need} runs torch {release.release} {newest.name}, its newest build "
                     f"with code for {labels(query.gpus)}")
        later.append(Alternative(_torch_command(release, newest.name, platform),
                                 f"after updating the driver to {newest_need} or newer: torch {release.release} "
                                 f"{newest.name}, the newest build"))
    advice = f"update the NVIDIA driver to at least {need}, then run: {after}"
    asked = f" (CUDA {cuda}, as asked)" if cuda else ""
    reason = (f"{_walk_prefix(query, candidate)}driver {version} is too old for every torch {release.release} "
              f"build{asked} with code for {labels(query.gpus)}; update the NVIDIA driver to at least {need}")
    unrestricted = query.unrestricted
    if cuda and unrestricted is not None and unrestricted.command is not None and unrestricted.uses_gpu:
        later.append(Alternative(unrestricted.command, f"without --cuda {cuda}: torch {unrestricted.release} "
                                                       f"{unrestricted.variant}, which driver {version} runs"))
        reason += f", or drop --cuda: torch {unrestricted.release} {unrestricted.variant} runs on this driver"
        advice += f"; or, without --cuda {cuda}, run: {unrestricted.command}"
    fallback = _torch_fallback(query, candidate.older)
    if fallback is None:
        return InstallPlan("torch", None, reason, variant=target.name, release=release.release, cuda=target.cuda,
                           needs_driver=need, advice=advice, verify=TORCH_VERIFY, warnings=tuple(notes),
                           alternatives=tuple(later[1:]), rejected=rejected)
    old_release, fit, native = fallback
    if not native:
        notes.append(f"driver {version} runs CUDA {fit.variant.cuda} only through minor-version compatibility: "
                     "limited feature set, PTX JIT may fail")
    return InstallPlan("torch", _torch_command(old_release, fit.variant.name, platform),
                       f"{reason}, or keep it with torch {old_release.release} {fit.variant.name} "
                       f"({_gpu_phrase(query.gpus, fit)})",
                       variant=fit.variant.name, release=old_release.release, cuda=fit.variant.cuda,
                       needs_driver=need, advice=advice, verify=TORCH_VERIFY, warnings=tuple(notes),
                       alternatives=tuple(later), rejected=rejected)
